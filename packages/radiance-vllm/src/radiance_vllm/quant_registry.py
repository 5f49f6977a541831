"""Registers the Radiance quantization configs with vLLM (by ``quant_method`` name)."""

from __future__ import annotations


def register_configs() -> None:
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS, register_quantization_config

    from radiance_vllm.paroquant_config import ParoQuantConfig

    for cls in (ParoQuantConfig,):
        if cls.get_name() not in QUANTIZATION_METHODS:
            register_quantization_config(cls.get_name())(cls)
