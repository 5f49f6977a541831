"""Shared base of the rotated-weight quantization configs (``paroquant``, ``paroquant_mxfp4``).

Which linears are quantized is read from the checkpoint itself (as z-lab's plugin does): a module that
stores the method's weight tensor (``qweight`` / ``weight_packed``) is quantized; one that stores a
plain ``weight`` stays in the model dtype through vLLM's ``UnquantizedLinearMethod`` (its skinny shapes at decode on
our skinny GEMM: :mod:`radiance_vllm.skinny_method`). A merged linear
whose partitions disagree is an error naming them.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.linear import LinearBase
from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

from radiance_vllm.checkpoint_scan import modules_with, resolve_model_dir, tensor_headers
from radiance_vllm.compile_key import stamp
from radiance_vllm.config_base import RadianceQuantConfig
from radiance_vllm.param_loading import CheckpointError, checkpoint_modules
from radiance_vllm.rotation_params import validate_checkpoint_rotations
from radiance_vllm.skinny_method import SkinnyLinearMethod


class RotatedQuantConfig(RadianceQuantConfig):
    #: The per-module tensor that marks a module as quantized in this format.
    weight_tensor = "qweight"
    #: Whether quantized modules carry rotation records (validated before any engine starts).
    rotated = True

    def __init__(self, krot: int, group_size: int):
        super().__init__()
        self.krot = krot
        self.group_size = group_size
        self.quantized_modules: frozenset[str] | None = None

    @staticmethod
    def _int(config: dict[str, Any], key: str, default: int, allowed: tuple[int, ...]) -> int:
        value = config.get(key, default)
        if value not in allowed:
            raise ValueError(f"quantization_config.{key}={value!r}: supported values are {allowed}")
        return value

    def maybe_update_config(self, model_name: str, hf_config=None, revision=None) -> None:
        """Find the quantized modules and validate their rotation records, before any engine starts."""
        model_dir = resolve_model_dir(model_name)
        self.quantized_modules = modules_with(tensor_headers(model_dir), self.weight_tensor)
        if not self.quantized_modules:
            raise CheckpointError(f"{model_name}: quant_method {self.get_name()!r} but no module stores "
                                  f"a {self.weight_tensor!r} tensor")
        if self.rotated:
            validate_checkpoint_rotations(model_dir, self.quantized_modules)

    def apply_vllm_mapper(self, hf_to_vllm_mapper) -> None:
        if self.quantized_modules is not None:
            mapped = (hf_to_vllm_mapper._map_name(m + "." + self.weight_tensor) for m in self.quantized_modules)
            tail = len(self.weight_tensor) + 1
            self.quantized_modules = frozenset(m[:-tail] for m in mapped if m)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> QuantizeMethodBase | None:
        if not isinstance(layer, LinearBase):
            return None
        stamp()
        sizes = getattr(layer, "output_sizes", None) or [layer.output_size]
        modules = checkpoint_modules(prefix, len(sizes), self.packed_modules_mapping)
        stored = [m in self.quantized_modules for m in modules]
        if all(stored):
            return self.linear_method()
        if not any(stored):
            return SkinnyLinearMethod()
        quantized = [m for m, s in zip(modules, stored, strict=True) if s]
        raise CheckpointError(f"{prefix}: merged linear mixes quantized {quantized} and unquantized "
                              f"{[m for m in modules if m not in quantized]} partitions")

    def linear_method(self) -> QuantizeMethodBase:
        raise NotImplementedError
