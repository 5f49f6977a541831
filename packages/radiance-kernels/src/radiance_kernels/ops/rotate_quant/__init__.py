"""``radiance::rotate_quant``: ParoQuant activation rotation + 8-bit quantisation, all partitions in one
launch (contract, scale rounding and row-sum definition in :mod:`.reference`).

``rotate_quant(x [M,K], pairs [P,krot,K] int16, theta [P,krot,K/2] fp16, channel_scales [P,K] fp16,
elem "e4m3"|"int8", granularity "token"|"group", backend) -> (A [P,M,K] uint8|int8, AS fp32 [P,M] |
[P,M,K/128], RS fp32 [P,M,K/128])``. The Triton backend uses the hardware e4m3 convert on GPUs (gated
equal to the software encoder) and the integer encoder under the interpreter.
"""

import torch

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.rotate_quant import reference

VERSION = 1


def _triton(x, pairs, theta, channel_scales, elem, granularity):
    from radiance_kernels.ops.rotate_quant import triton as impl

    reference.check_args(x, pairs, theta, channel_scales, elem, granularity)
    out = impl.rotate_quant(x, pairs, theta, channel_scales, elem, granularity, hw=not triton_interpreted())
    return out["A"], out["AS"], out["RS"]


register_op("rotate_quant", VERSION, reference=reference.rotate_quant, triton=_triton)


@torch.library.custom_op("radiance::rotate_quant", mutates_args=())
def rotate_quant(
    x: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor,
    elem: str, granularity: str, backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return implementation("rotate_quant", backend, x.device)(x, pairs, theta, channel_scales, elem, granularity)


def fake_outputs(x, pairs, elem, granularity):
    """Empty (A, AS, RS) of the right shapes/dtypes (the fake impls of every rotate+quant op)."""
    reference.check_quant(elem, granularity)
    P, M, K = pairs.shape[0], x.shape[-2], x.shape[-1]  # x: [M, K], or [S, M, K] split partials
    a, s, r = reference.output_shapes(P, M, K, granularity)
    return (x.new_empty(a, dtype=reference.code_dtype(elem)), x.new_empty(s, dtype=torch.float32),
            x.new_empty(r, dtype=torch.float32))


@rotate_quant.register_fake
def _(x, pairs, theta, channel_scales, elem, granularity, backend):
    return fake_outputs(x, pairs, elem, granularity)
