"""Registers the Radiance quantization configs with vLLM (by ``quant_method`` name)."""

from __future__ import annotations


def register_configs() -> None:
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, register_quantization_config

    from radiance_vllm.mxfp4_config import ParoQuantMXFP4Config, RadianceMXFP4Config
    from radiance_vllm.nvfp4_config import NVFP4ToMXFP4Config
    from radiance_vllm.paroquant_config import ParoQuantConfig

    for cls in (ParoQuantConfig, ParoQuantMXFP4Config, RadianceMXFP4Config, NVFP4ToMXFP4Config):
        if cls.get_name() not in QUANTIZATION_METHODS:
            register_quantization_config(cls.get_name())(cls)
