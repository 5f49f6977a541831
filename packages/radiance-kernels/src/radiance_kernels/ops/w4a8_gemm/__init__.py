"""``radiance::w4a8_gemm`` / ``radiance::w4a8_gemm_out``: int4/int5 asymmetric group-128 weights x
e4m3/int8 activations with per-token or per-group scales, P <= 3 activation partitions, bf16 out.

Math and the ``prepare`` weight layout: :mod:`.reference`. ``band`` is "auto" (decode at M <= 64, else
prefill), "decode" or "prefill"; ``zpe`` selects the zero-point epilogue (same result at the bf16 floor).
``_out`` writes rows < M of a caller buffer ``out [>= M, N]`` and leaves the rest untouched.
"""

import torch

from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.w4a8_gemm import reference
from radiance_kernels.ops.w4a8_gemm.reference import W4Prepared, prepare, prepare_codes, unprepare

VERSION = 1
_BANDS = ("auto", "decode", "prefill")


def _reference(A, AS, RS, w, bounds, zpe, band, out=None):
    if band not in _BANDS:
        raise ValueError(f"w4a8_gemm: band must be one of {_BANDS}, got {band!r}")
    return reference.gemm(A, AS, RS, w, bounds, out=out)


def _triton(A, AS, RS, w, bounds, zpe, band, out=None):
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    return impl.gemm(A, AS, RS, w, bounds, zpe, band, out=out)


register_op("w4a8_gemm", VERSION, reference=_reference, triton=_triton)


@torch.library.custom_op("radiance::w4a8_gemm", mutates_args=())
def w4a8_gemm(
    A: torch.Tensor, AS: torch.Tensor, RS: torch.Tensor, wq: torch.Tensor, wh: torch.Tensor, sz: torch.Tensor,
    bounds: list[int], bits: int, zpe: bool, band: str, backend: str,
) -> torch.Tensor:
    impl = implementation("w4a8_gemm", backend, A.device)
    return impl(A, AS, RS, W4Prepared(wq, wh, sz, bits), bounds, zpe, band)


@w4a8_gemm.register_fake
def _(A, AS, RS, wq, wh, sz, bounds, bits, zpe, band, backend):
    return torch.empty(A.shape[1], sz.shape[1], dtype=torch.bfloat16, device=A.device)


@torch.library.custom_op("radiance::w4a8_gemm_out", mutates_args=("out",))
def w4a8_gemm_out(
    out: torch.Tensor, A: torch.Tensor, AS: torch.Tensor, RS: torch.Tensor, wq: torch.Tensor, wh: torch.Tensor,
    sz: torch.Tensor, bounds: list[int], bits: int, zpe: bool, band: str, backend: str,
) -> None:
    impl = implementation("w4a8_gemm", backend, A.device)
    impl(A, AS, RS, W4Prepared(wq, wh, sz, bits), bounds, zpe, band, out=out)


__all__ = ["w4a8_gemm", "w4a8_gemm_out", "prepare", "prepare_codes", "unprepare", "W4Prepared", "VERSION"]
