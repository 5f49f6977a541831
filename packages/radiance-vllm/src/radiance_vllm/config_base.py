"""What every Radiance quantization config answers the same way (vLLM's ``QuantizationConfig`` queries)."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig


class RadianceQuantConfig(QuantizationConfig):
    """Activations in any float dtype; no capability floor beyond Ampere; the config is read from
    ``config.json``'s ``quantization_config`` (no extra files)."""

    def get_supported_act_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 80

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []
