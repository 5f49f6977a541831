"""Round trip through vLLM's own dflash loader, in-process (no server).

Builds the engine config vLLM would build for ``--speculative-config {"method": "dflash", ...}``,
resolves the draft architecture through vLLM's model registry, instantiates that class, fills every
parameter with NaN and loads the checkpoint with the class's ``load_weights``. Unexpected tensors make
vLLM's loader raise; a parameter still NaN afterwards is missing from the checkpoint (the embedding, LM
head and optional mask embedding are exempt: vLLM shares them from the target).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import torch
from safetensors import safe_open

SHARED_FROM_TARGET = ("embed_tokens", "lm_head", "mask_embedding", "draft_id_to_target_id")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_vllm_load(drafter_dir: str | Path, target_dir: str | Path, max_model_len: int = 512) -> dict:
    """Load ``drafter_dir`` with vLLM's dflash model class; raises on unexpected or missing tensors."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.utils.torch_utils import set_default_torch_dtype
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    except ImportError as exc:
        raise RuntimeError(f"vLLM is not importable here ({exc}); install radiance-vllm[cpu] or [gpu]") from exc

    d = Path(drafter_dir)
    hf = json.loads((d / "config.json").read_text())
    dtype = "bfloat16" if hf.get("dtype") == "bfloat16" or "quantization_config" in hf else "float32"
    spec = {"method": "dflash", "model": str(d), "num_speculative_tokens": hf["block_size"] - 1}
    cfg = EngineArgs(model=str(target_dir), dtype=dtype, max_model_len=max_model_len, enforce_eager=True,
                     speculative_config=spec).create_engine_config()
    draft_cfg = cfg.speculative_config.draft_model_config
    cls, arch = ModelRegistry.resolve_model_cls(draft_cfg.architectures, model_config=draft_cfg)
    with set_current_vllm_config(cfg):
        if not torch.distributed.is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        ensure_model_parallel_initialized(1, 1)
        with set_default_torch_dtype(draft_cfg.dtype), torch.device("cpu"):
            model = cls(vllm_config=cfg)
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    p.fill_(float("nan"))
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            names = list(f.keys())
            model.load_weights((k, f.get_tensor(k)) for k in names)
    missing = [n for n, p in model.named_parameters()
               if p.is_floating_point() and torch.isnan(p.float()).any().item()
               and not any(s in n for s in SHARED_FROM_TARGET)]
    if missing:
        raise ValueError(f"{d}: vLLM's {cls.__name__} parameters not provided by the checkpoint: {missing}")
    return {"architecture": arch, "model_class": f"{cls.__module__}.{cls.__qualname__}", "dtype": dtype,
            "checkpoint_tensors": len(names), "vllm_parameters": sorted(n for n, _ in model.named_parameters()),
            "vllm_aux_layers": list(get_eagle3_aux_layers_from_config(cfg.speculative_config) or [])}
