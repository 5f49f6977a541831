"""Chunked gated delta rule (prefill) in Triton, in the overflow-safe form.

Layouts as in :mod:`.naive`; a batch of B equal-length sequences runs as packed sequences with
cu_seqlens = [0, T, 2T, …]. One program per (sequence·value head, Dv block of BV columns) walks its
sequence in chunks of C tokens, carrying its [Dk, BV] slice of the state in fp32 registers (the Dv
columns of the recurrence are independent). Within a chunk, with G = cumsum(g) (inclusive, from the
chunk start), S the state entering the chunk and M_ij = exp(G_i − G_j) for j ≤ i, else 0:

    A  = strict_lower(beta_i · M_ij · k_i·k_j)                 [C, C]
    W  = (I + A)⁻¹ diag(beta) (V − diag(e^G) K S)             the delta-rule write values, [C, BV]
    O  = scale · (diag(e^G) Q S + (M ⊙ Q Kᵀ) W)
    S' = e^{G_last} S + (diag(e^{G_last − G}) K)ᵀ W

(I + A)⁻¹ comes from :func:`_unit_lower_inverse`. Every exponent is a segment sum G_i − G_j = Σ_{j<l≤i} g_l
(j ≤ i; G_last − G_t is row C−1), G_t or G_last, masked with ``tl.where`` to −inf *before* the exp: with
g ≤ 0 none is positive, so no factor exceeds 1 and nothing overflows however long the chunk's gate span
(no split e^{G_i−c}·e^{c−G_j} pair, no 0·inf). The segment sums are one masked dot
``tril(1) · (g_l [l > j])``, so their rounding scales with the segment, not with |G| (a 300-nat chunk
would otherwise cost 3e-5 of relative accuracy in every weight). All math is fp32: dots at ``tf32x3``
(three tensor-core passes, fp32-level accuracy) on NVIDIA, ``ieee`` on ROCm and in the interpreter.
Padding tokens past T load g = beta = 0 and q = k = v = 0: G stays at the last live value and they
contribute nothing.
"""

import torch
import triton
import triton.language as tl

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.gdn.fused_recurrent import state_tile
from radiance_kernels.ops.gdn.naive import L2_EPS
from radiance_kernels.tl.bf16 import to_bf16

BV = 32
SB = tl.constexpr(16)


def dot_precision() -> str:
    """fp32-accurate ``tl.dot`` input precision for this platform."""
    return "ieee" if triton_interpreted() or torch.version.hip else "tf32x3"


@triton.jit
def _l2norm_rows(x, eps):
    return x / tl.sqrt(tl.sum(x * x, 1) + eps)[:, None]


@triton.jit
def _unit_lower_inverse(A, t, C: tl.constexpr, DOT: tl.constexpr):
    """(I + A)⁻¹ for strictly lower-triangular A [C, C]; t = chunk start + arange(C) (C a multiple of 16).

    D = (I + A_d)⁻¹ for the block diagonal A_d of 16×16 blocks by forward substitution, all blocks at
    once (step i finishes row i of every block: D_r = e_r − Σ_j A_d[r, j] D_j). The off-diagonal rest
    A_o gives I + A = (I + A_d)(I + N) with N = D A_o strictly block-lower, so N^{C/16} = 0 and
    (I + A)⁻¹ = (I − N + N² − …) D exactly.
    """
    same = (t[:, None] // SB) == (t[None, :] // SB)
    A_d = tl.where(same, A, 0.0)
    D = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    for i in range(1, SB):
        D -= tl.dot(tl.where((t % SB == i)[:, None], A_d, 0.0), D, input_precision=DOT)
    N = tl.dot(D, A - A_d, input_precision=DOT)
    X = D
    inv = D
    for _ in range(C // SB - 1):
        X = -tl.dot(N, X, input_precision=DOT)
        inv += X
    return inv


@triton.jit
def _chunk_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, o_ptr, st_ptr, cu_ptr, Hk, Hv, Dk, Dv, scale, eps,
                  C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, HAS_S0: tl.constexpr,
                  L2NORM: tl.constexpr, OUT_BF16: tl.constexpr, INTERP: tl.constexpr, DOT: tl.constexpr):
    bh = tl.program_id(0)
    n = bh // Hv
    h = bh % Hv
    hk = h // (Hv // Hk)
    bos = tl.load(cu_ptr + n).to(tl.int32)
    T = tl.load(cu_ptr + n + 1).to(tl.int32) - bos
    rc = tl.arange(0, C)
    rk, rv, kmask, vmask, smask, s_off = state_tile(bh, Dk, Dv, BK, BV)
    if HAS_S0:
        S = tl.load(s0_ptr + s_off, mask=smask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    for c0 in range(0, T, C):
        t = c0 + rc
        tmask = t < T
        # [C, C] masks from t, not rc: loop-variant, so recomputed per chunk rather than held in registers
        causal = t[:, None] >= t[None, :]
        strict = t[:, None] > t[None, :]
        qk_off = ((bos + t) * Hk + hk) * Dk
        qkmask = tmask[:, None] & kmask[None, :]
        tv = (bos + t) * Hv + h
        vo_off = tv[:, None] * Dv + rv[None, :]
        vomask = tmask[:, None] & vmask[None, :]
        g = tl.load(g_ptr + tv, mask=tmask, other=0.0).to(tl.float32)
        beta = tl.load(beta_ptr + tv, mask=tmask, other=0.0).to(tl.float32)
        K = tl.load(k_ptr + qk_off[:, None] + rk[None, :], mask=qkmask, other=0.0).to(tl.float32)
        if L2NORM:
            K = _l2norm_rows(K, eps)
        G = tl.cumsum(g, 0)
        seg = tl.dot(tl.where(causal, 1.0, 0.0), tl.where(strict, g[:, None], 0.0), input_precision=DOT)
        M = tl.exp(tl.where(causal, seg, float("-inf")))
        A = tl.where(strict, beta[:, None] * M * tl.dot(K, tl.trans(K), input_precision=DOT), 0.0)
        Tinv = _unit_lower_inverse(A, t, C, DOT)
        eG = tl.exp(tl.where(tmask, G, float("-inf")))
        V = tl.load(v_ptr + vo_off, mask=vomask, other=0.0).to(tl.float32)
        KS = tl.dot(K, S, input_precision=DOT)
        W = tl.dot(Tinv, beta[:, None] * (V - eG[:, None] * KS), input_precision=DOT)
        Q = tl.load(q_ptr + qk_off[:, None] + rk[None, :], mask=qkmask, other=0.0).to(tl.float32)
        if L2NORM:
            Q = _l2norm_rows(Q, eps)
        O = tl.dot(eG[:, None] * Q, S, input_precision=DOT)
        O += tl.dot(tl.dot(Q, tl.trans(K), input_precision=DOT) * M, W, input_precision=DOT)
        O *= scale
        if OUT_BF16:
            tl.store(o_ptr + vo_off, to_bf16(O, INTERP), mask=vomask)
        else:
            tl.store(o_ptr + vo_off, O, mask=vomask)
        G_last = tl.sum(tl.where(rc == C - 1, G, 0.0), 0)
        tail = tl.exp(tl.where(tmask, tl.sum(tl.where(rc[:, None] == C - 1, seg, 0.0), 0), float("-inf")))
        S = tl.exp(G_last) * S + tl.dot(tl.trans(tail[:, None] * K), W, input_precision=DOT)
    tl.store(st_ptr + s_off, S, mask=smask)


def chunk(q, k, v, g, beta, initial_state, scale: float, qk_l2norm: bool, chunk_size: int, cu_seqlens):
    """Triton chunked prefill; inputs validated by the op. Returns (o in v's dtype, state fp32)."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    if cu_seqlens is None:
        cu_seqlens = torch.arange(B + 1, dtype=torch.int32, device=v.device) * T
    N = cu_seqlens.shape[0] - 1
    o = torch.empty_like(v)
    state = torch.empty((N, Hv, Dk, Dv), dtype=torch.float32, device=v.device)
    s0 = state if initial_state is None else initial_state.contiguous()
    bv = min(BV, triton.next_power_of_2(Dv))
    _chunk_kernel[(N * Hv, triton.cdiv(Dv, bv))](
        q, k, v, g, beta, s0, o, state, cu_seqlens, Hk, Hv, Dk, Dv, scale, L2_EPS,
        C=chunk_size, BK=triton.next_power_of_2(Dk), BV=bv, HAS_S0=initial_state is not None,
        L2NORM=qk_l2norm, OUT_BF16=v.dtype == torch.bfloat16, INTERP=triton_interpreted(),
        DOT=dot_precision())
    return o, state
