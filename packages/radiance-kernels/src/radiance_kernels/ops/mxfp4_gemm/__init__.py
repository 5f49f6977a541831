"""``radiance::mxfp4_gemm`` / ``radiance::mxfp4_gemm_out``: MXFP4 weights (e2m1 + e8m0 per 32) x e4m3
per-token activations, P <= 3 activation partitions, bf16 out.

Math and the ``prepare`` layout: :mod:`.reference`. ``band``: "auto" (decode at M <= 64, else prefill),
"decode" or "prefill". ``_out`` writes rows < M of ``out [>= M, N]`` and leaves the rest untouched.
"""

import torch

from radiance_kernels.ops.mxfp4_gemm import reference
from radiance_kernels.ops.mxfp4_gemm.reference import MXPrepared, prepare, unprepare
from radiance_kernels.ops.registry import implementation, register_op

VERSION = 1
_BANDS = ("auto", "decode", "prefill")


def _reference(A, AS, w, bounds, band, out=None):
    if band not in _BANDS:
        raise ValueError(f"mxfp4_gemm: band must be one of {_BANDS}, got {band!r}")
    return reference.gemm(A, AS, w, bounds, out=out)


def _triton(A, AS, w, bounds, band, out=None):
    from radiance_kernels.ops.mxfp4_gemm import triton as impl

    return impl.gemm(A, AS, w, bounds, band, out=out)


register_op("mxfp4_gemm", VERSION, reference=_reference, triton=_triton)


@torch.library.custom_op("radiance::mxfp4_gemm", mutates_args=())
def mxfp4_gemm(
    A: torch.Tensor, AS: torch.Tensor, wp: torch.Tensor, ws: torch.Tensor, bounds: list[int], band: str, backend: str
) -> torch.Tensor:
    return implementation("mxfp4_gemm", backend, A.device)(A, AS, MXPrepared(wp, ws), bounds, band)


@mxfp4_gemm.register_fake
def _(A, AS, wp, ws, bounds, band, backend):
    return torch.empty(A.shape[1], wp.shape[1], dtype=torch.bfloat16, device=A.device)


@torch.library.custom_op("radiance::mxfp4_gemm_out", mutates_args=("out",))
def mxfp4_gemm_out(
    out: torch.Tensor, A: torch.Tensor, AS: torch.Tensor, wp: torch.Tensor, ws: torch.Tensor, bounds: list[int],
    band: str, backend: str,
) -> None:
    implementation("mxfp4_gemm", backend, A.device)(A, AS, MXPrepared(wp, ws), bounds, band, out=out)


__all__ = ["mxfp4_gemm", "mxfp4_gemm_out", "prepare", "unprepare", "MXPrepared", "VERSION"]
