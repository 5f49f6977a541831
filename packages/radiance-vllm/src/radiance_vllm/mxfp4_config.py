"""``quant_method: "paroquant_mxfp4"``: MXFP4 weights (e2m1 + e8m0 per 32) with ParoQuant rotations;
``"radiance_mxfp4"``: the same weights without rotations.

config.json ``quantization_config``: ``{"quant_method": "paroquant_mxfp4", "group_size": 128, "krot": 8}``;
per projection ``weight_packed [N, K/2]`` uint8, ``weight_scale [N, K/32]`` uint8 and the rotation
records. Activations are e4m3 per token (the MXFP4 GEMM's only activation form; the ``RADIANCE_PQ_*``
activation knobs apply to ``paroquant`` only).
"""

from __future__ import annotations

from typing import Any

from radiance_vllm.rotated_config import RotatedQuantConfig


class ParoQuantMXFP4Config(RotatedQuantConfig):
    weight_tensor = "weight_packed"

    def __repr__(self) -> str:
        return f"ParoQuantMXFP4Config(group_size={self.group_size}, krot={self.krot})"

    @classmethod
    def get_name(cls) -> str:
        return "paroquant_mxfp4"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ParoQuantMXFP4Config:
        return cls(krot=cls._int(config, "krot", 8, tuple(range(1, 17))),
                   group_size=cls._int(config, "group_size", 128, (128,)))

    def linear_method(self):
        from radiance_vllm.mxfp4_method import MXFP4LinearMethod

        return MXFP4LinearMethod(self)


class RadianceMXFP4Config(RotatedQuantConfig):
    """``quant_method: "radiance_mxfp4"``: MXFP4 weights with no rotations — radiance-quant's offline
    NVFP4 → MXFP4 conversion (``{"quant_method": "radiance_mxfp4", "block_size": 32, "exp_rule": ...}``).
    Served with the identity rotation, exactly as the load-time NVFP4 → MXFP4 path serves the same weights."""

    weight_tensor = "weight_packed"
    rotated = False

    def __repr__(self) -> str:
        return "RadianceMXFP4Config()"

    @classmethod
    def get_name(cls) -> str:
        return "radiance_mxfp4"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RadianceMXFP4Config:
        cls._int(config, "block_size", 32, (32,))
        rule = config.get("exp_rule", "mse")
        if rule not in ("mse", "ocp"):
            raise ValueError(f"quantization_config.exp_rule={rule!r}: supported values are ('mse', 'ocp')")
        return cls(krot=0, group_size=128)  # 128: the identity rotation's group (K must be a multiple)

    def linear_method(self):
        from radiance_vllm.mxfp4_method import MXFP4LinearMethod

        return MXFP4LinearMethod(self, rotated=False)
