"""W4A8 / W5A8 group GEMM: the numerical spec, and the kernel weight layout (:func:`prepare`).

Activations (from ``radiance::rotate_quant``): ``A [P, M, K]`` — uint8 e4m3 codes or int8 values —
with ``AS`` fp32 ``[P, M]`` (per token) or ``[P, M, K/128]`` (per group), and ``RS [P, M, K/128]``
fp32 = per-group sum of the decoded codes. Weights: codes ``q [K, N]`` in [0, 2^b), zeros
``z [G, N]``, scales ``s [G, N]`` fp16, ``G = K/128``. Output column ``n`` belongs to partition ``p``
with ``bounds[p] <= n < bounds[p+1]`` (P <= 3 distinct rotations of the same input)::

    out[m, n] = sum_g s[g,n] * as(m,g) * ( sum_{k in g} a[p,m,k] * q[k,n]  -  z[g,n] * RS[p,m,g] )

with ``a`` the decoded activation and ``as(m, g)`` = AS[p,m] or AS[p,m,g]; bf16 output. The reference
evaluates this literally in float64 (so it is the spec to the bf16 floor), chunked to bound memory.

Kernel layout (:func:`prepare`, once per layer at load; group size 128, ``off = 2^(b-1)``):
- ``wq`` int32 ``[K/8, N]``: nibble j (bits 4j..4j+3) of ``wq[i, n]`` = low 4 bits of ``q[8i + j, n]``.
  K-packed, N-contiguous: a [BK, BN] weight tile is BK/8 rows of BN consecutive words (coalesced).
- ``wh`` uint8 ``[K/8, N]`` (int5; ``[0, N]`` for int4): bit j of ``wh[i, n]`` = bit 4 of ``q[8i + j, n]`` — the
  fifth bits of word ``wq[i, n]``'s nibbles, indexed as ``wq`` (a kernel's tile of one names the same tile of the
  other: the decode kernel's TMA ring brings both in the same fragment layout).
- ``sz`` int32 ``[G, N]``: bits 0..15 = fp16 bits of ``s[g, n]``, bits 16..31 = int16 ``d = z - off``
  (the seeds' SZ pair in one 4-byte load; ``s*d`` is formed exactly in fp32 in the kernel).
The kernel multiplies by the signed code ``c = q - off`` (exact in e4m3 and int8) and applies
``sum a*q - z*RS = sum a*c - d*RS``. Weight traffic: b + 0.25 bits per weight.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from radiance_kernels.formats import awq, e4m3

GROUP = 128
DECODE_MAX_M = 64  # band "auto": decode up to this many tokens, prefill above


class W4Prepared(NamedTuple):
    wq: torch.Tensor
    wh: torch.Tensor
    sz: torch.Tensor
    bits: int


def _i32(words: torch.Tensor) -> torch.Tensor:
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def prepare_codes(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, bits: int) -> W4Prepared:
    """codes [K, N], zeros [K/128, N], scales fp16 [K/128, N] → kernel layout (module doc)."""
    if bits not in (4, 5):
        raise ValueError(f"w4a8 prepare: bits must be 4 or 5, got {bits}")
    K, N = codes.shape
    if K % GROUP or zeros.shape != (K // GROUP, N) or scales.shape != (K // GROUP, N):
        raise ValueError(
            f"w4a8 prepare: codes [K, N] with K % 128 == 0, zeros/scales [K/128, N]; got "
            f"{tuple(codes.shape)}, {tuple(zeros.shape)}, {tuple(scales.shape)}"
        )
    q = codes.to(torch.int64)
    shifts = torch.arange(8, device=codes.device, dtype=torch.int64) * 4
    wq = _i32(((q.reshape(K // 8, 8, N) & 15) << shifts[None, :, None]).sum(1))
    if bits == 5:
        wh = (((q.reshape(K // 8, 8, N) >> 4) & 1) << (shifts // 4)[None, :, None]).sum(1).to(torch.uint8)
    else:
        wh = torch.zeros(0, N, dtype=torch.uint8, device=codes.device)
    d = zeros.to(torch.int64) - (1 << (bits - 1))
    sbits = scales.to(torch.float16).contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
    sz = _i32(((d & 0xFFFF) << 16) | sbits)
    return W4Prepared(wq.contiguous(), wh.contiguous(), sz.contiguous(), bits)


def prepare(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> W4Prepared:
    """Checkpoint tensors (AWQ ``qweight [K, N/8]``, ``qzeros [K/128, N/8]``, ``scales [K/128, N]``,
    int5 also ``qweight_hi [K, N/32]``, ``qzeros_hi [K/128, N/32]``) → kernel layout."""
    if (qweight_hi is None) != (qzeros_hi is None):
        raise ValueError("w4a8 prepare: qweight_hi and qzeros_hi must be given together (int5)")
    if qweight.dtype != torch.int32 or qzeros.dtype != torch.int32:
        raise ValueError(f"w4a8 prepare: qweight/qzeros must be int32, got {qweight.dtype}/{qzeros.dtype}")
    if qweight_hi is None:
        return prepare_codes(awq.unpack_int4(qweight), awq.unpack_int4(qzeros), scales, 4)
    return prepare_codes(awq.unpack_int5(qweight, qweight_hi), awq.unpack_int5(qzeros, qzeros_hi), scales, 5)


def unprepare(w: W4Prepared) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Kernel layout → (codes int64 [K, N], zeros int64 [G, N], scales fp16 [G, N])."""
    wq = w.wq.to(torch.int64) & 0xFFFFFFFF
    K8, N = wq.shape
    shifts = torch.arange(8, device=wq.device, dtype=torch.int64) * 4
    q = ((wq[:, None, :] >> shifts[None, :, None]) & 15).reshape(K8 * 8, N)
    if w.bits == 5:
        q = q | (((w.wh.to(torch.int64)[:, None, :] >> (shifts // 4)[None, :, None]) & 1).reshape(K8 * 8, N) << 4)
    hi = (w.sz.to(torch.int64) >> 16) & 0xFFFF
    d = torch.where(hi >= 2**15, hi - 2**16, hi)
    return q, d + (1 << (w.bits - 1)), group_scales(w.sz)


def group_scales(sz: torch.Tensor) -> torch.Tensor:
    """The fp16 group scales ``s [G, N]`` held in bits 0..15 of the ``sz`` words."""
    lo = sz.to(torch.int32) & 0xFFFF
    return torch.where(lo >= 2**15, lo - 2**16, lo).to(torch.int16).view(torch.float16)


def check_inputs(A, AS, RS, w: W4Prepared, bounds: list[int], op: str) -> tuple[int, int, int, int, bool]:
    """Validate shapes/dtypes; returns (P, M, K, N, group_scales)."""
    if A.dim() != 3 or A.dtype not in (torch.uint8, torch.int8):
        raise ValueError(f"{op}: A must be [P, M, K] uint8 (e4m3 codes) or int8, got {A.dtype} {tuple(A.shape)}")
    P, M, K = A.shape
    G = K // GROUP
    N = w.sz.shape[1]
    if K % GROUP or w.wq.shape != (K // 8, N) or w.sz.shape != (G, N):
        raise ValueError(
            f"{op}: weights wq [K/8, N], sz [K/128, N] for K={K}; got {tuple(w.wq.shape)}, {tuple(w.sz.shape)}"
        )
    if w.bits == 5 and (w.wh.shape != (K // 8, N) or w.wh.dtype != torch.uint8):
        raise ValueError(f"{op}: int5 needs wh uint8 [K/8, N] = {(K // 8, N)}, got {w.wh.dtype} {tuple(w.wh.shape)}")
    if AS.dtype != torch.float32 or AS.shape not in ((P, M), (P, M, G)):
        raise ValueError(
            f"{op}: AS must be fp32 [P, M] or [P, M, K/128] = {(P, M)} / {(P, M, G)}, got {AS.dtype} {tuple(AS.shape)}"
        )
    if RS.dtype != torch.float32 or RS.shape != (P, M, G):
        raise ValueError(f"{op}: RS must be fp32 [P, M, K/128] = {(P, M, G)}, got {RS.dtype} {tuple(RS.shape)}")
    if len(bounds) != P + 1 or bounds[0] != 0 or bounds[-1] != N or list(bounds) != sorted(bounds) or P > 3:
        raise ValueError(f"{op}: bounds must be [P+1] increasing from 0 to N={N} with P={P} <= 3, got {list(bounds)}")
    return P, M, K, N, AS.dim() == 3


def check_out(out: torch.Tensor, M: int, N: int, op: str) -> None:
    if out.dtype != torch.bfloat16 or out.dim() != 2 or out.shape[0] < M or out.shape[1] != N or out.stride(1) != 1:
        raise ValueError(
            f"{op}: out must be bf16 [>= {M}, {N}] with unit column stride, got {out.dtype} {tuple(out.shape)}"
        )


def decode_activations(A: torch.Tensor) -> torch.Tensor:
    """A codes → float64 values (e4m3 decode for uint8, identity for int8)."""
    return (e4m3.decode(A) if A.dtype == torch.uint8 else A).to(torch.float64)


def gemm(A, AS, RS, w: W4Prepared, bounds: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
    """The spec (module doc) in float64 → bf16 [M, N]; with ``out`` writes rows < M of ``out``."""
    res = _gemm64(A, AS, RS, w, bounds)
    if out is None:
        return res.to(torch.bfloat16)
    M, N = res.shape
    check_out(out, M, N, "w4a8_gemm")
    out[:M].copy_(res)
    return out


def gemm_partials(A, AS, RS, w: W4Prepared, bounds: list[int]) -> torch.Tensor:
    """The spec as split partials ``[1, M, N]`` fp32: one, :func:`gemm`'s bf16 output (its in-order sum rounded to
    bf16 is that output, bit for bit)."""
    return _gemm64(A, AS, RS, w, bounds).to(torch.bfloat16).to(torch.float32)[None]


def _gemm64(A, AS, RS, w: W4Prepared, bounds: list[int]) -> torch.Tensor:
    P, M, K, N, grouped = check_inputs(A, AS, RS, w, bounds, "w4a8_gemm")
    G = K // GROUP
    q, z, s = unprepare(w)
    q, z, s = q.to(torch.float64), z.to(torch.float64), s.to(torch.float64)
    res = torch.empty(M, N, dtype=torch.float64, device=A.device)
    chunk_m = max(1, min(M, 2**24 // max(1, G * 512)))
    for p in range(P):
        a = decode_activations(A[p]).reshape(M, G, GROUP).transpose(0, 1)  # [G, M, 128]
        asc = AS[p].to(torch.float64)
        asc = asc.transpose(0, 1) if grouped else asc[None, :].expand(G, M)  # [G, M]
        rs = RS[p].to(torch.float64).transpose(0, 1)  # [G, M]
        for n0 in range(bounds[p], bounds[p + 1], 512):
            n1 = min(n0 + 512, bounds[p + 1])
            qg = q[:, n0:n1].reshape(G, GROUP, n1 - n0)
            for m0 in range(0, M, chunk_m):
                m1 = min(m0 + chunk_m, M)
                dot = torch.bmm(a[:, m0:m1], qg)  # [G, m, n]
                inner = dot - z[:, None, n0:n1] * rs[:, m0:m1, None]
                res[m0:m1, n0:n1] = (s[:, None, n0:n1] * asc[:, m0:m1, None] * inner).sum(0)
    return res
