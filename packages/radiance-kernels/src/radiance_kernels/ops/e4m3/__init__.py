"""``radiance::e4m3_encode`` / ``radiance::e4m3_decode``: the activation codec as ops.

encode: float → uint8 code (RNE, saturating ±448, NaN → 0, zero → +0); decode: code → float32.
"""

import torch

from radiance_kernels.ops.e4m3 import reference
from radiance_kernels.ops.registry import implementation, register_op


def _triton_encode(x):
    from radiance_kernels.ops.e4m3 import triton as impl

    return impl.encode(x)


def _triton_decode(c):
    from radiance_kernels.ops.e4m3 import triton as impl

    return impl.decode(c)


register_op("e4m3_encode", 1, reference=reference.encode, triton=_triton_encode)
register_op("e4m3_decode", 1, reference=reference.decode, triton=_triton_decode)


@torch.library.custom_op("radiance::e4m3_encode", mutates_args=())
def e4m3_encode(x: torch.Tensor, backend: str) -> torch.Tensor:
    return implementation("e4m3_encode", backend, x.device)(x)


@e4m3_encode.register_fake
def _(x, backend):
    return torch.empty(x.shape, dtype=torch.uint8, device=x.device)


@torch.library.custom_op("radiance::e4m3_decode", mutates_args=())
def e4m3_decode(codes: torch.Tensor, backend: str) -> torch.Tensor:
    return implementation("e4m3_decode", backend, codes.device)(codes)


@e4m3_decode.register_fake
def _(codes, backend):
    return torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
