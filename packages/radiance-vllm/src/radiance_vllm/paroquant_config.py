"""``quant_method: "paroquant"``: z-lab's ParoQuant int4 checkpoints as published, and the int5 bit-plane variant.

config.json ``quantization_config``: ``{"quant_method": "paroquant", "bits": 4 | 5, "group_size": 128,
"krot": 8}``. Activation element, scale granularity and the zero-point epilogue come from the knobs
(``RADIANCE_PQ_ACT``, ``RADIANCE_PQ_SCALES``, ``RADIANCE_PQ_ZPE``), not from the checkpoint.
"""

from __future__ import annotations

from typing import Any

from radiance_vllm.rotated_config import RotatedQuantConfig


class ParoQuantConfig(RotatedQuantConfig):
    weight_tensor = "qweight"

    def __init__(self, bits: int, group_size: int, krot: int):
        super().__init__(krot=krot, group_size=group_size)
        self.bits = bits

    def __repr__(self) -> str:
        return f"ParoQuantConfig(bits={self.bits}, group_size={self.group_size}, krot={self.krot})"

    @classmethod
    def get_name(cls) -> str:
        return "paroquant"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ParoQuantConfig:
        return cls(bits=cls._int(config, "bits", 4, (4, 5)),
                   group_size=cls._int(config, "group_size", 128, (128,)),
                   krot=cls._int(config, "krot", 8, tuple(range(1, 17))))

    def linear_method(self):
        from radiance_vllm.paroquant_method import ParoQuantLinearMethod

        return ParoQuantLinearMethod(self)
