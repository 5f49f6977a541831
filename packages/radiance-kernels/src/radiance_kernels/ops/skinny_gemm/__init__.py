"""``radiance::skinny_gemm``: ``y = x @ w.T`` for tiny N and M ≤ 64 (split-K, deterministic).

x: [M, K] bf16, w: [N, K] bf16 → y: [M, N] bf16; fp32 accumulation, one rounding to bf16.

``after`` (version 2): the output of a launch that read what ``x``'s writer wrote with it and waited for that write
before letting the next launch start — in_proj_qkvz's W4A8 GEMM on the add+RMSNorm producer's quantized output, ``x``
being the producer's bf16 output. The op then runs in its ``overlap`` form (:mod:`.triton`: loading ``x`` and
multiplying beside that launch, writing after it) and, through the data edge, after that launch in any graph. The
bits do not change.
"""

import torch

from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.skinny_gemm import reference


def _reference(x, w, after):
    return reference.skinny_gemm(x, w)


def _triton(x, w, after):
    from radiance_kernels.ops.skinny_gemm import triton as impl

    return impl.skinny_gemm(x, w, overlap=after is not None)


register_op("skinny_gemm", 2, reference=_reference, triton=_triton)

MAX_M = 64


def _check(x: torch.Tensor, w: torch.Tensor, after: torch.Tensor | None) -> None:
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        raise TypeError(f"skinny_gemm: x and w must be bfloat16, got x {x.dtype}, w {w.dtype}")
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"skinny_gemm: expected x [M, K] and w [N, K], "
                         f"got x {tuple(x.shape)}, w {tuple(w.shape)}")
    if x.shape[0] > MAX_M:
        raise ValueError(f"skinny_gemm: x has M={x.shape[0]} rows, at most {MAX_M} supported")
    if after is not None and after.device != x.device:
        raise ValueError(f"skinny_gemm: after is on {after.device}, x on {x.device}")


@torch.library.custom_op("radiance::skinny_gemm", mutates_args=())
def skinny_gemm(x: torch.Tensor, w: torch.Tensor, backend: str, after: torch.Tensor | None = None) -> torch.Tensor:
    _check(x, w, after)
    return implementation("skinny_gemm", backend, x.device)(x, w, after)


@skinny_gemm.register_fake
def _(x, w, backend, after=None):
    _check(x, w, after)
    return x.new_empty((x.shape[0], w.shape[0]))
