"""CHECKALL (``RADIANCE_CHECKALL=1``): in-serve check of every new GEMM shape against the reference op.

For each new (N, K, M) of a quantized linear the served output is recomputed by the reference backend
from the same quantized activations, over column chunks of ``RADIANCE_CHECKALL_CHUNK`` (so the full
dequantized weight is never held), and ``rel = ‖y − ref‖ / ‖ref‖`` is logged. vLLM's profiling pass
feeds dummy inputs: a log line says whether the inputs were real or all zeros (all activation scales
zero), and a shape first seen
with zero inputs is checked again on its first real input. Above ``RADIANCE_CHECKALL_TOL`` it raises.
"""

from __future__ import annotations

import sys

import torch

from radiance_vllm.knobs import settings

_SEEN: set[tuple[int, int, int, bool]] = set()


class CheckAllError(RuntimeError):
    """A served GEMM output disagrees with the reference beyond the bar."""


def _chunk_bounds(bounds: list[int], n0: int, n1: int) -> list[int]:
    return [min(max(b - n0, 0), n1 - n0) for b in bounds]


def check_w4a8(layer, x, A, AS, RS, y) -> None:
    from radiance_kernels.ops.w4a8_gemm import W4Prepared
    from radiance_vllm import kernel_calls

    w = layer.w4a8

    def ref(n0, n1):
        sub = W4Prepared(w.wq[:, n0:n1], w.wh[:, n0:n1] if w.bits == 5 else w.wh, w.sz[:, n0:n1], w.bits)
        return kernel_calls.w4a8_gemm(A, AS, RS, sub, _chunk_bounds(layer.rot_bounds_list, n0, n1), False,
                                      "reference")

    _check(layer, x, AS, y, ref)


def check_mxfp4(layer, x, A, AS, y) -> None:
    from radiance_vllm import kernel_calls

    w = layer.mxfp4

    def ref(n0, n1):
        sub = kernel_calls.mxfp4_slice(w, n0, n1)
        return kernel_calls.mxfp4_gemm(A, AS, sub, _chunk_bounds(layer.rot_bounds_list, n0, n1), "reference")

    _check(layer, x, AS, y, ref)


def _check(layer, x, AS, y, ref) -> None:
    s = settings()
    M, K = x.shape
    N = y.shape[-1]
    real = bool(AS.abs().amax() > 0) if AS.numel() else False
    key = (N, K, M, real)
    if key in _SEEN:
        return
    _SEEN.add(key)
    err2 = ref2 = 0.0
    for n0 in range(0, N, s.checkall_chunk):
        n1 = min(n0 + s.checkall_chunk, N)
        r = ref(n0, n1).to(torch.float64)
        err2 += float(((y[:, n0:n1].to(torch.float64) - r) ** 2).sum())
        ref2 += float((r**2).sum())
    rel = (err2 / ref2) ** 0.5 if ref2 > 0 else (0.0 if err2 == 0 else float("inf"))
    inputs = f"real inputs (max scale {float(AS.abs().amax()):.3g})" if real else "zero inputs (profiling pass)"
    ok = rel <= s.checkall_tol
    print(f"[radiance.checkall] {layer.prefix} N={N} K={K} M={M} rel={rel:.3e} {inputs} "
          f"{'ok' if ok else 'FAIL'} (bar {s.checkall_tol:g})", file=sys.stderr, flush=True)
    if not ok:
        raise CheckAllError(f"{layer.prefix} N={N} K={K} M={M}: rel {rel:.3e} > {s.checkall_tol:g}")
