"""NVFP4 → MXFP4 at load for compressed-tensors checkpoints (opt-in: ``RADIANCE_NVFP4_MXFP4=1``).

With the knob on, a checkpoint whose ``quantization_config`` is compressed-tensors with an
``nvfp4-pack-quantized`` group is claimed by this config (vLLM's override hook) instead of vLLM's
compressed-tensors path. What each module stores decides its method (read from the safetensors headers):

- NVFP4 linears (``weight_packed`` + ``weight_global_scale``) → dequantized per partition, requantized
  to MXFP4 (``RADIANCE_NVFP4_EXP`` rule), served by the MXFP4 kernel;
- FP8 per-channel linears (``weight`` float8 + ``weight_scale``) → MXFP4 too, or dequantized
  (``RADIANCE_NVFP4_FP8_LAYERS``);
- an FP8 lm_head → dequantized to the model dtype; plain linears stay unquantized, except those whose
  name ends with one of ``RADIANCE_NVFP4_BF16_LAYERS`` (e.g. ``in_proj_ba``), requantized to MXFP4.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

from radiance_vllm.checkpoint_scan import resolve_model_dir, tensor_headers
from radiance_vllm.compile_key import stamp
from radiance_vllm.config_base import RadianceQuantConfig
from radiance_vllm.knobs import settings
from radiance_vllm.param_loading import CheckpointError, checkpoint_modules
from radiance_vllm.skinny_method import SkinnyLinearMethod


def is_nvfp4(hf_quant_cfg: dict[str, Any]) -> bool:
    if hf_quant_cfg.get("quant_method") != "compressed-tensors":
        return False
    groups = hf_quant_cfg.get("config_groups") or {}
    return hf_quant_cfg.get("format") == "nvfp4-pack-quantized" or any(
        g.get("format") == "nvfp4-pack-quantized" for g in groups.values())


class NVFP4ToMXFP4Config(RadianceQuantConfig):
    def __init__(self):
        super().__init__()
        s = settings()
        self.rule, self.fp8_target, self.bf16_suffixes = s.nvfp4_exp, s.nvfp4_fp8_layers, s.nvfp4_bf16_layers
        self.kinds: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"NVFP4ToMXFP4Config(rule={self.rule}, fp8_layers={self.fp8_target}, bf16_layers={self.bf16_suffixes})"

    @classmethod
    def get_name(cls) -> str:
        return "radiance_nvfp4_mxfp4"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NVFP4ToMXFP4Config:
        if not is_nvfp4(config):
            raise ValueError("radiance_nvfp4_mxfp4 reads compressed-tensors NVFP4 checkpoints only")
        return cls()

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None) -> str | None:
        if is_nvfp4(hf_quant_cfg) and settings().nvfp4_mxfp4 and user_quant in (None, cls.get_name()):
            return cls.get_name()
        return None

    def maybe_update_config(self, model_name: str, hf_config=None, revision=None) -> None:
        headers = tensor_headers(resolve_model_dir(model_name))
        for name, (dtype, _) in headers.items():
            module, _, leaf = name.rpartition(".")
            if leaf == "weight_global_scale":
                self.kinds[module] = "nvfp4"
            elif leaf == "weight" and dtype.startswith("F8_"):
                self.kinds[module] = "fp8"
        if "nvfp4" not in self.kinds.values():
            raise CheckpointError(f"{model_name}: compressed-tensors NVFP4 config but no *.weight_global_scale tensor")

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> QuantizeMethodBase | None:
        from radiance_vllm.requant_method import FP8LMHeadMethod, RequantLinearMethod

        if isinstance(layer, ParallelLMHead):
            return FP8LMHeadMethod() if self.kinds.get(prefix) == "fp8" else None
        if not isinstance(layer, LinearBase):
            return None
        stamp()
        sizes = getattr(layer, "output_sizes", None) or [layer.output_size]
        modules = checkpoint_modules(prefix, len(sizes), self.packed_modules_mapping)
        kinds = {self.kinds.get(m, "plain") for m in modules}
        if len(kinds) > 1:
            raise CheckpointError(f"{prefix}: merged linear mixes storage kinds {sorted(kinds)} over {modules}")
        kind = kinds.pop()
        if kind == "nvfp4":
            return RequantLinearMethod(self, "nvfp4", "mxfp4")
        if kind == "fp8":
            return RequantLinearMethod(self, "fp8", self.fp8_target)
        if prefix.endswith(self.bf16_suffixes or ("\0",)):
            return RequantLinearMethod(self, "plain", "mxfp4")
        return SkinnyLinearMethod()
