"""Round trip through vLLM's own dflash loader, in-process (no server).

Builds the engine config vLLM would build for ``--speculative-config {"method": "dflash", ...}``,
resolves the draft architecture through vLLM's model registry, instantiates that class, fills every
parameter with NaN and loads the checkpoint with the class's ``load_weights``. Unexpected tensors make
vLLM's loader raise; a parameter still NaN afterwards is missing from the checkpoint (the embedding, LM
head and optional mask embedding are exempt: vLLM shares them from the target; so are the FP8 KV-cache
scales vLLM's fp8 config adds to every attention, which vLLM defaults when a checkpoint has none).

``kernels=False`` builds the model without its FP8 GEMM kernels (vLLM's CPU backend has block-FP8 kernels
only on AMX CPUs): vLLM's own ``Fp8LinearMethod`` still creates the parameters (``weight`` float8_e4m3fn
[N, K], ``weight_scale_inv`` float32 [N/128, K/128]) and vLLM's own weight loaders fill them (shape-checked),
but nothing can run. With ``reference`` (the bf16 export of the same drafter, loaded the same way) every
FP8 parameter, dequantised by vLLM's ``block_dequant``, must be within one e4m3 rounding of the reference:
``|deq - ref| ≤ (2^-4 + 2^-8)·|ref| + 2^-9·s`` (half an e4m3 step, 2^-4 relative for normals and s·2^-10 in
the subnormal range of the block scale s, plus the reference's own bf16 rounding, 2^-9 relative, both from
the same fp32 master); unquantised parameters must be equal.
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from unittest import mock

import torch
from safetensors import safe_open

SHARED_FROM_TARGET = ("embed_tokens", "lm_head", "mask_embedding", "draft_id_to_target_id")
# created by vLLM's fp8 config for an FP8 KV cache; vLLM defaults them when a checkpoint has none
KV_CACHE_SCALES = ("attn.q_scale", "attn.k_scale", "attn.v_scale", "attn.prob_scale")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_vllm_load(drafter_dir: str | Path, target_dir: str | Path, max_model_len: int = 512,
                    kernels: bool = True, reference: str | Path | None = None) -> dict:
    """Load ``drafter_dir`` with vLLM's dflash model class; raises on unexpected or missing tensors, and (with
    ``reference``) on a parameter that does not match the reference export."""
    model, info = _load(Path(drafter_dir), target_dir, max_model_len, kernels)
    if reference is not None:
        ref_model, _ = _load(Path(reference), target_dir, max_model_len, kernels)
        info.update(_compare(model, ref_model, Path(drafter_dir)))
    return info


def _load(d: Path, target_dir: str | Path, max_model_len: int, kernels: bool):
    try:
        from vllm.config import set_current_vllm_config
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.utils.torch_utils import set_default_torch_dtype
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    except ImportError as exc:
        raise RuntimeError(f"vLLM is not importable here ({exc}); install radiance-vllm[cpu] or [gpu]") from exc

    hf = json.loads((d / "config.json").read_text())
    dtype = "bfloat16" if hf.get("dtype") == "bfloat16" or "quantization_config" in hf else "float32"
    spec = {"method": "dflash", "model": str(d), "num_speculative_tokens": hf["block_size"] - 1}
    cfg = EngineArgs(model=str(target_dir), dtype=dtype, max_model_len=max_model_len, enforce_eager=True,
                     speculative_config=spec).create_engine_config()
    draft_cfg = cfg.speculative_config.draft_model_config
    cls, arch = ModelRegistry.resolve_model_cls(draft_cfg.architectures, model_config=draft_cfg)
    no_kernels = (contextlib.nullcontext() if kernels else
                  mock.patch("vllm.model_executor.layers.quantization.fp8.init_fp8_linear_kernel",
                             lambda **_: None))
    with set_current_vllm_config(cfg):
        if not torch.distributed.is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        ensure_model_parallel_initialized(1, 1)
        with set_default_torch_dtype(draft_cfg.dtype), torch.device("cpu"), no_kernels:
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
               and not any(s in n for s in SHARED_FROM_TARGET + KV_CACHE_SCALES)]
    if missing:
        raise ValueError(f"{d}: vLLM's {cls.__name__} parameters not provided by the checkpoint: {missing}")
    return model, {"architecture": arch, "model_class": f"{cls.__module__}.{cls.__qualname__}", "dtype": dtype,
                   "kernels": "built" if kernels else "not built (layout check only)",
                   "checkpoint_tensors": len(names),
                   "vllm_parameters": sorted(n for n, _ in model.named_parameters()),
                   "vllm_parameter_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                   "vllm_aux_layers": list(get_eagle3_aux_layers_from_config(cfg.speculative_config) or [])}


def _compare(model, ref_model, d: Path) -> dict:
    """Every parameter of ``model`` (FP8 ones dequantised by vLLM's block_dequant) against ``ref_model``'s."""
    from vllm.model_executor.layers.quantization.utils.int8_utils import block_dequant

    block = json.loads((d / "config.json").read_text()).get("quantization_config", {}).get("weight_block_size")
    params, ref = dict(model.named_parameters()), dict(ref_model.named_parameters())
    worst_rel, n_fp8, n_equal = 0.0, 0, 0
    for name, p in params.items():
        if name.endswith("weight_scale_inv") or any(s in name for s in SHARED_FROM_TARGET + KV_CACHE_SCALES):
            continue
        if name not in ref or ref[name].shape != p.shape:
            raise ValueError(f"{d}: vLLM parameter {name} {tuple(p.shape)} has no same-shaped reference "
                             f"({tuple(ref[name].shape) if name in ref else 'absent'})")
        r = ref[name].detach().float()
        scale = params.get(name.removesuffix("weight") + "weight_scale_inv")
        if p.dtype != torch.float8_e4m3fn:
            if not torch.equal(p.detach().float(), r):
                raise ValueError(f"{d}: unquantised vLLM parameter {name} differs from the reference")
            n_equal += 1
            continue
        if scale is None or block is None:
            raise ValueError(f"{d}: FP8 parameter {name} without weight_scale_inv / weight_block_size")
        deq = block_dequant(p.detach(), scale.detach().float(), block)
        s = scale.detach().float().repeat_interleave(block[0], 0)[:r.shape[0]].repeat_interleave(block[1], 1)
        bound = (2.0**-4 + 2.0**-8) * r.abs() + 2.0**-9 * s[:, :r.shape[1]]
        err = (deq - r).abs()
        if (err > bound).any():
            raise ValueError(f"{d}: FP8 parameter {name} dequantises outside one e4m3 rounding of the reference "
                             f"(max excess {(err - bound).max().item():.3g})")
        worst_rel = max(worst_rel, (err.max() / r.abs().max().clamp_min(1e-30)).item())
        n_fp8 += 1
    return {"fp8_parameters_checked": n_fp8, "equal_parameters_checked": n_equal,
            "fp8_max_error_rel_to_amax": worst_rel}
