"""Gated delta rule decode step(s) in Triton: the recurrence of :mod:`.naive`, token by token.

One program per (batch·value head, Dv block of BV columns) holds its [Dk, BV] slice of the state in
fp32 registers for all T tokens (T is one or a few: decode / speculative verify) and writes it back
once. Layouts as in :mod:`.naive`; the input state is read, the new state is a fresh tensor.
"""

import torch
import triton
import triton.language as tl

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.gdn.naive import L2_EPS
from radiance_kernels.tl.bf16 import to_bf16

BV = 32


@triton.jit
def state_tile(bh, Dk, Dv, BK: tl.constexpr, BV: tl.constexpr):
    """Program ``(bh, program_id(1))``'s ``[BK, BV]`` slice of state ``[B·Hv, Dk, Dv]``: key rows, value columns,
    their masks, the slice's mask and offsets."""
    rk = tl.arange(0, BK)
    rv = tl.program_id(1) * BV + tl.arange(0, BV)
    kmask = rk < Dk
    vmask = rv < Dv
    return rk, rv, kmask, vmask, kmask[:, None] & vmask[None, :], bh * Dk * Dv + rk[:, None] * Dv + rv[None, :]


@triton.jit
def _recurrent_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, o_ptr, st_ptr, T, Hk, Hv, Dk, Dv,
                      scale, eps, BK: tl.constexpr, BV: tl.constexpr, L2NORM: tl.constexpr,
                      OUT_BF16: tl.constexpr, INTERP: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // Hv
    h = bh % Hv
    hk = h // (Hv // Hk)
    rk, rv, kmask, vmask, smask, s_off = state_tile(bh, Dk, Dv, BK, BV)
    S = tl.load(s0_ptr + s_off, mask=smask, other=0.0).to(tl.float32)
    for t in range(T):
        qk_off = ((b * T + t) * Hk + hk) * Dk + rk
        q = tl.load(q_ptr + qk_off, mask=kmask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + qk_off, mask=kmask, other=0.0).to(tl.float32)
        tv = (b * T + t) * Hv + h
        v = tl.load(v_ptr + tv * Dv + rv, mask=vmask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + tv).to(tl.float32)
        beta = tl.load(beta_ptr + tv).to(tl.float32)
        if L2NORM:
            q = q / tl.sqrt(tl.sum(q * q, 0) + eps)
            k = k / tl.sqrt(tl.sum(k * k, 0) + eps)
        S = S * tl.exp(g)
        w = beta * (v - tl.sum(S * k[:, None], 0))
        S = S + k[:, None] * w[None, :]
        o = scale * tl.sum(S * q[:, None], 0)
        if OUT_BF16:
            tl.store(o_ptr + tv * Dv + rv, to_bf16(o, INTERP), mask=vmask)
        else:
            tl.store(o_ptr + tv * Dv + rv, o, mask=vmask)
    tl.store(st_ptr + s_off, S, mask=smask)


def recurrent(q, k, v, g, beta, state, scale: float, qk_l2norm: bool):
    """Triton decode; inputs validated by the op. Returns (o in v's dtype, new state fp32)."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    q, k, v, g, beta, state = (x.contiguous() for x in (q, k, v, g, beta, state))
    o = torch.empty_like(v)
    new_state = torch.empty((B, Hv, Dk, Dv), dtype=torch.float32, device=v.device)
    bv = min(BV, triton.next_power_of_2(Dv))
    _recurrent_kernel[(B * Hv, triton.cdiv(Dv, bv))](
        q, k, v, g, beta, state, o, new_state, T, Hk, Hv, Dk, Dv, scale, L2_EPS,
        BK=triton.next_power_of_2(Dk), BV=bv, L2NORM=qk_l2norm, OUT_BF16=v.dtype == torch.bfloat16,
        INTERP=triton_interpreted())
    return o, new_state
