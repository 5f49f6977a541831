"""``radiance::skinny_gemm``: ``y = x @ w.T`` for tiny N and M ≤ 64 (split-K, deterministic).

x: [M, K] bf16, w: [N, K] bf16 → y: [M, N] bf16; fp32 accumulation, one rounding to bf16.
"""

import torch

from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.skinny_gemm import reference


def _triton(x, w):
    from radiance_kernels.ops.skinny_gemm import triton as impl

    return impl.skinny_gemm(x, w)


register_op("skinny_gemm", 1, reference=reference.skinny_gemm, triton=_triton)

MAX_M = 64


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        raise TypeError(f"skinny_gemm: x and w must be bfloat16, got x {x.dtype}, w {w.dtype}")
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"skinny_gemm: expected x [M, K] and w [N, K], "
                         f"got x {tuple(x.shape)}, w {tuple(w.shape)}")
    if x.shape[0] > MAX_M:
        raise ValueError(f"skinny_gemm: x has M={x.shape[0]} rows, at most {MAX_M} supported")


@torch.library.custom_op("radiance::skinny_gemm", mutates_args=())
def skinny_gemm(x: torch.Tensor, w: torch.Tensor, backend: str) -> torch.Tensor:
    _check(x, w)
    return implementation("skinny_gemm", backend, x.device)(x, w)


@skinny_gemm.register_fake
def _(x, w, backend):
    _check(x, w)
    return x.new_empty((x.shape[0], w.shape[0]))
