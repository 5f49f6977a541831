"""``radiance::w4a8_gemm`` / ``radiance::w4a8_gemm_out``: int4/int5 asymmetric group-128 weights x
e4m3/int8 activations with per-token or per-group scales, P <= 3 activation partitions, bf16 out.

Math and the ``prepare`` weight layout: :mod:`.reference`. ``band`` is "auto" (decode at M <= 64, else
prefill), "decode" or "prefill"; ``zpe`` selects the zero-point epilogue (same result at the bf16 floor).
``_out`` writes rows < M of a caller buffer ``out [>= M, N]`` and leaves the rest untouched.

``radiance::w4a8_gemm_partials`` (decode band, M <= ``DECODE_MAX_M``): the same product left as fp32 split-K
partials ``[S, M, N]`` — their sum in split order from zero, rounded to bf16, is ``w4a8_gemm``'s output bit for bit
(the kernel's own reduction) — for a consumer that reads its input as partials (the stream producers) and so takes
the split reduction off the GEMM's tail: no arrival count, no last program's L2 round trips (H200 call 100: 1.4-5.2
us per decode GEMM). ``S`` is the tuned config's split count, or 1 where the GPU's table marks the shape ``reduced``
(the GEMM sums its splits in the kernel: :mod:`.tuned`); the reference backend returns one partial.
"""

import torch

from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.w4a8_gemm import reference
from radiance_kernels.ops.w4a8_gemm.reference import DECODE_MAX_M, W4Prepared, prepare, prepare_codes, unprepare

VERSION = 1
_BANDS = ("auto", "decode", "prefill")


def _reference(A, AS, RS, w, bounds, zpe, band, out=None):
    if band not in _BANDS:
        raise ValueError(f"w4a8_gemm: band must be one of {_BANDS}, got {band!r}")
    return reference.gemm(A, AS, RS, w, bounds, out=out)


def _triton(A, AS, RS, w, bounds, zpe, band, out=None):
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    return impl.gemm(A, AS, RS, w, bounds, zpe, band, out=out)


def _check_partials_m(A):
    if A.shape[1] > DECODE_MAX_M:
        raise ValueError(f"w4a8_gemm_partials: a decode-band op (M <= {DECODE_MAX_M}), got M={A.shape[1]}")


def _reference_partials(A, AS, RS, w, bounds, zpe):
    _check_partials_m(A)
    return reference.gemm_partials(A, AS, RS, w, bounds)


def _triton_partials(A, AS, RS, w, bounds, zpe):
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    _check_partials_m(A)
    return impl.gemm(A, AS, RS, w, bounds, zpe, "decode", defer=True)


register_op("w4a8_gemm", VERSION, reference=_reference, triton=_triton)
register_op("w4a8_gemm_partials", VERSION, reference=_reference_partials, triton=_triton_partials)


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


@torch.library.custom_op("radiance::w4a8_gemm_partials", mutates_args=())
def w4a8_gemm_partials(
    A: torch.Tensor, AS: torch.Tensor, RS: torch.Tensor, wq: torch.Tensor, wh: torch.Tensor, sz: torch.Tensor,
    bounds: list[int], bits: int, zpe: bool, backend: str,
) -> torch.Tensor:
    impl = implementation("w4a8_gemm_partials", backend, A.device)
    return impl(A, AS, RS, W4Prepared(wq, wh, sz, bits), bounds, zpe)


@w4a8_gemm_partials.register_fake
def _(A, AS, RS, wq, wh, sz, bounds, bits, zpe, backend):
    return torch.empty(torch.library.get_ctx().new_dynamic_size(), A.shape[1], sz.shape[1], dtype=torch.float32,
                       device=A.device)


__all__ = ["w4a8_gemm", "w4a8_gemm_out", "w4a8_gemm_partials", "prepare", "prepare_codes", "unprepare", "W4Prepared",
           "VERSION", "DECODE_MAX_M"]
