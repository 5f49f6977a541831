"""MXFP4 weights x e4m3 per-token activations: the numerical spec and the kernel weight layout.

Activations ``A [P, M, K]`` uint8 e4m3 codes with ``AS [P, M]`` fp32 per-token scales (rotate_quant's
token granularity; no row sums needed: MXFP4 has no zero point). Weights: e2m1 codes and e8m0 block
scales (:mod:`radiance_kernels.formats.mx`, blocks of 32 along K). Column n in partition p
(``bounds[p] <= n < bounds[p+1]``, P <= 3)::

    out[m, n] = AS[p, m] * sum_k e4m3(A[p, m, k]) * e2m1(q[n, k]) * 2^(e[n, k // 32] - 127)

evaluated in float64, bf16 output. The kernel's weight values are exact (normal, finite fp32/bf16) for
block exponents 2 <= e <= 252; below that a GPU may flush the subnormal products to zero.

Kernel layout (:func:`prepare`, once at load, from the checkpoint's ``weight_packed [N, K/2]`` uint8
(low nibble = even k) and ``weight_scale [N, K/32]`` uint8):
- ``wp`` int32 ``[K/8, N]``: nibble j of ``wp[i, n]`` = e2m1 code of ``W[n, 8i + j]`` (the W4A8 word
  layout: K-packed, N-contiguous, one unpack helper for both GEMMs);
- ``ws`` uint8 ``[K/32, N]``: the e8m0 exponents transposed (N-contiguous).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from radiance_kernels.formats import e4m3, mx

GROUP = 128  # K tile of the kernel; K % 128 == 0


class MXPrepared(NamedTuple):
    wp: torch.Tensor
    ws: torch.Tensor


def prepare(weight_packed: torch.Tensor, weight_scale: torch.Tensor) -> MXPrepared:
    """Checkpoint ``weight_packed [N, K/2]`` + ``weight_scale [N, K/32]`` (uint8) → kernel layout."""
    if weight_packed.dtype != torch.uint8 or weight_scale.dtype != torch.uint8 or weight_packed.dim() != 2:
        raise ValueError(
            "mxfp4 prepare: weight_packed/weight_scale must be uint8 2-d, "
            f"got {weight_packed.dtype} {weight_scale.dtype}"
        )
    N, K2 = weight_packed.shape
    K = 2 * K2
    if K % GROUP or weight_scale.shape != (N, K // 32):
        raise ValueError(
            f"mxfp4 prepare: weight_packed [N, K/2] with K % 128 == 0 and weight_scale [N, K/32]; got "
            f"{tuple(weight_packed.shape)}, {tuple(weight_scale.shape)}"
        )
    codes = mx.unpack_fp4(weight_packed).to(torch.int64).t().reshape(K // 8, 8, N)
    shifts = torch.arange(8, device=codes.device, dtype=torch.int64) * 4
    words = (codes << shifts[None, :, None]).sum(1)
    wp = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return MXPrepared(wp.contiguous(), weight_scale.t().contiguous())


def unprepare(w: MXPrepared) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel layout → (weight_packed [N, K/2], weight_scale [N, K/32])."""
    words = w.wp.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(8, device=words.device, dtype=torch.int64) * 4
    codes = ((words[:, None, :] >> shifts[None, :, None]) & 15).reshape(-1, words.shape[1]).t()
    return mx.pack_fp4(codes.to(torch.uint8)), w.ws.t().contiguous()


def check_inputs(A, AS, w: MXPrepared, bounds: list[int], op: str) -> tuple[int, int, int, int]:
    """Validate shapes/dtypes; returns (P, M, K, N)."""
    if A.dim() != 3 or A.dtype != torch.uint8:
        raise ValueError(f"{op}: A must be [P, M, K] uint8 e4m3 codes, got {A.dtype} {tuple(A.shape)}")
    P, M, K = A.shape
    N = w.wp.shape[1]
    if K % GROUP or w.wp.shape != (K // 8, N) or w.ws.shape != (K // 32, N) or w.ws.dtype != torch.uint8:
        raise ValueError(
            f"{op}: weights wp [K/8, N], ws uint8 [K/32, N] for K={K}; got {tuple(w.wp.shape)}, {tuple(w.ws.shape)}"
        )
    if AS.dtype != torch.float32 or AS.shape != (P, M):
        raise ValueError(f"{op}: AS must be fp32 [P, M] = {(P, M)} (per-token), got {AS.dtype} {tuple(AS.shape)}")
    if len(bounds) != P + 1 or bounds[0] != 0 or bounds[-1] != N or list(bounds) != sorted(bounds) or P > 3:
        raise ValueError(f"{op}: bounds must be [P+1] increasing from 0 to N={N} with P={P} <= 3, got {list(bounds)}")
    return P, M, K, N


def gemm(A, AS, w: MXPrepared, bounds: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
    """The spec (module doc) in float64 → bf16 [M, N]; with ``out`` writes rows < M of ``out``."""
    from radiance_kernels.ops.w4a8_gemm.reference import check_out

    P, M, K, N = check_inputs(A, AS, w, bounds, "mxfp4_gemm")
    packed, scales = unprepare(w)
    res = torch.empty(M, N, dtype=torch.float64, device=A.device)
    for p in range(P):
        x = e4m3.decode(A[p]).to(torch.float64) * AS[p].to(torch.float64)[:, None]
        for n0 in range(bounds[p], bounds[p + 1], 4096):
            n1 = min(n0 + 4096, bounds[p + 1])
            W = mx.dequantize_mxfp4(packed[n0:n1], scales[n0:n1]).to(torch.float64)
            res[:, n0:n1] = x @ W.t()
    if out is None:
        return res.to(torch.bfloat16)
    check_out(out, M, N, "mxfp4_gemm")
    out[:M].copy_(res)
    return out
