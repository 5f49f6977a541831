"""Decode W4A8 / W5A8 GEMM on the CUDA cores, no MMA: int8 activations by 4-way byte dot products, e4m3 by
fp32 FMAs on exactly biased codes.

At M <= 4 a tensor-core tile wastes most of its rows and stages both operands through shared memory
behind barriers; here each thread owns BN / (32 x warps) columns for all ``BM`` tokens, unpacks each
weight word once and multiplies it into every token's activations. Math (:mod:`.reference`, with the
unsigned code ``q`` and ``z = d + off``)::

    int8:  t[m, n] = sum_{k in g} a[m, k] * q[k, n]                 (int32, exact: |t| < 2^20)
    e4m3:  t[m, n] = sum_{k in g} a[m, k] * (2^b + q[k, n])         (fp32; = sum a q + 2^b RS[m, g])
    acc[m, n] += as(m, g) * (s[g, n] * t  -  s[g, n] * (z[g, n] + [e4m3] 2^b) * RS[m, g])

int8: ``dp4a`` on NVIDIA, the plain-Triton twin :func:`dot4_sw` elsewhere and under the interpreter. e4m3:
``2^b + q`` is a float whose mantissa top bits are the code (:func:`biased_code`: a shift and a mask-or,
no convert), so every product ``a * (2^b + q)`` (4 x 6 significant bits) is exact and only the fp32 sum
rounds (~2^-24 of the group's partial sums, far under the bf16 output). The session-3 fp32 flavour built
floats by the 2^23 bias trick (a convert's worth of ops more per code) and ran at ~2 programs per SM (H200
call 12: lost to the tensor-core loop everywhere, gate_up M=1 80.7 vs 57.9 us).

Layout: word ``wq[16 g + i, n]`` holds nibbles ``q[128 g + 8 i + j]``, j = 0..7; its even nibbles
(``w & 0x0F0F0F0F``) and odd ones (``(w >> 4) & 0x0F0F0F0F``) are byte-interleaved into ``lo`` = bytes
``q[8i .. 8i+3]`` and ``hi`` = ``q[8i+4 .. 8i+7]`` (one ``prmt`` each), which meet the activation words
the halves of the activation word ``A64[m, 16 g + i]`` (``A`` [P, M, K] bytes read as [P, M, K/8] words).
int5: bit 4 of ``q[8i + j]`` is bit ``j`` of the byte ``wh[16 g + i]``; four such bits go to the
four bytes' bit 4 by one multiply (``(x * 0x204081) & 0x01010101``: copies at shifts 0/7/14/21 never
collide). Program: ``BN`` columns x all ``BM`` tokens over its split's groups; splits as the tensor-core
decode band (partials summed in split order by the tile's last program, :func:`.triton.store_tile`).
The ZPE flag is moot here: the zero-point term is folded in the loop at no extra pass. ``TRIGGER`` / ``WAIT`` (as
:mod:`.mma2`'s): after its group loop each program lets the next launch, a programmatic dependent, start; launched as
one itself, it waits for the launch before it at its start.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from radiance_kernels.ops.w4a8_gemm.triton import (
    NO_SPECIALIZE,
    scale_rows,
    spread_even,
    store_tile,
    sz_scale,
    tile_setup,
)
from radiance_kernels.tl.e4m3 import e4m3_decode


@triton.jit
def dot4_sw(a, w, acc):
    """``acc + sum_b int8(a.byte[b]) * uint8(w.byte[b])`` in plain integer ops (int32 tensors)."""
    for b in tl.static_range(4):
        acc += ((a << (24 - 8 * b)) >> 24) * ((w >> (8 * b)) & 0xFF)
    return acc


@triton.jit
def dot4(a, w, acc, PTX: tl.constexpr):
    """4-way int8 dot product accumulate (``w``'s bytes are < 128, so signed x signed is exact)."""
    if PTX:
        r = tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, w, acc], dtype=tl.int32,
                                      is_pure=True, pack=1)
    else:
        r = dot4_sw(a, w, acc)
    return r


@triton.jit
def nibble_bytes(w, PTX: tl.constexpr):
    """Word of 8 nibbles q0..q7 → (bytes q0..q3, bytes q4..q7): even nibbles ``e`` and odd ``o`` (one mask
    each) byte-interleaved, (e.b0, o.b0, e.b1, o.b1) and (e.b2, o.b2, e.b3, o.b3) (``prmt`` on NVIDIA)."""
    e = w & 0x0F0F0F0F
    o = (w >> 4) & 0x0F0F0F0F
    if PTX:
        lo = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x5140;", "=r,r,r", [e, o], dtype=tl.int32,
                                       is_pure=True, pack=1)
        hi = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, 0x7362;", "=r,r,r", [e, o], dtype=tl.int32,
                                       is_pure=True, pack=1)
    else:
        lo = (e & 0xFF) | ((o & 0xFF) << 8) | ((e & 0xFF00) << 8) | ((o & 0xFF00) << 16)
        e = e >> 16
        o = o >> 16
        hi = (e & 0xFF) | ((o & 0xFF) << 8) | ((e & 0xFF00) << 8) | ((o & 0xFF00) << 16)
    return lo, hi


@triton.jit
def spread4(x):
    """Bits 0..3 of ``x`` to bit 4 of bytes 0..3."""
    return ((x * 0x204081) & 0x01010101) << 4


@triton.jit
def e4m3x4(word, PTX: tl.constexpr):
    """The four e4m3 codes of an int32 word (byte b = code b) → four fp32 values: two paired hardware converts to
    fp16 and four widenings on NVIDIA, the integer decoder elsewhere."""
    if PTX:
        r = tl.inline_asm_elementwise(
            """{ .reg .b16 l, h, p0, p1, q0, q1; .reg .b32 p, q;
            mov.b32 {l, h}, $4; cvt.rn.f16x2.e4m3x2 p, l; cvt.rn.f16x2.e4m3x2 q, h;
            mov.b32 {p0, p1}, p; mov.b32 {q0, q1}, q;
            cvt.f32.f16 $0, p0; cvt.f32.f16 $1, p1; cvt.f32.f16 $2, q0; cvt.f32.f16 $3, q1; }""",
            "=r,=r,=r,=r,r", [word], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    else:
        r = (e4m3_decode(word & 0xFF), e4m3_decode((word >> 8) & 0xFF), e4m3_decode((word >> 16) & 0xFF),
             e4m3_decode((word >> 24) & 0xFF))
    return r


@triton.constexpr_function
def _biased_code_asm(B):
    """PTX: byte ``B`` of $1 as byte 2 of ``0x41000000`` (the other output bytes from the constant)."""
    return f"prmt.b32 $0, 0x41000000, $1, {0x3400 + 0x100 * B:#x};"


@triton.jit
def biased_code(x, B: tl.constexpr, PTX: tl.constexpr):
    """Byte B of ``x`` (a code ``q < 32``) → the fp32 ``8 + q/16``, exactly: the code as mantissa bits 16..20 under
    the exponent of 8 (``0x41000000``), one ``prmt`` on NVIDIA."""
    if PTX:
        r = tl.inline_asm_elementwise(_biased_code_asm(B), "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    else:
        r = (((x >> (8 * B)) & 0xFF) << 16) | 0x41000000
    return r.to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _w4a8_gemv_kernel(
    a_ptr, as_ptr, rs_ptr, wq_ptr, wh_ptr, sz_ptr, ws_ptr, out_ptr, cnt_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    BITS: tl.constexpr, INT8: tl.constexpr, GROUP_AS: tl.constexpr, SPLIT: tl.constexpr, RW: tl.constexpr,
    HW: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PTX: tl.constexpr, TRIGGER: tl.constexpr = False,
    WAIT: tl.constexpr = False,
):
    if WAIT:  # as the mma2 kernel: launched as a programmatic dependent, the previous grid complete from here on
        gdc_wait()
    part, offs_m, offs_n, mask_m, mask_n, g_lo, g_hi = tile_setup(M, N, K, b1, b2, groups_per_split, BM, BN, BK, 1)
    G = K // BK
    rows = tl.minimum(offs_m, M - 1)  # clamped, so the loop's loads need no masks (stores are masked)
    cols = offs_n[None, :]
    mask_w = mask_n[None, :]  # masked, not clamped: a clamp hides the columns' contiguity (4-byte, not 16-byte loads)
    a_ptr = a_ptr.to(tl.pointer_type(tl.int64))  # int8 [P, M, K] read as [P, M, K/8] 8-byte words
    a_rows = a_ptr + part.to(tl.int64) * M * (K // 8) + rows.to(tl.int64) * (K // 8)
    as_rows, rs_rows = scale_rows(as_ptr, rs_ptr, part, M, G, rows, GROUP_AS)
    OFF: tl.constexpr = 1 << (BITS - 1)
    TS: tl.constexpr = 1.0 if INT8 else 16.0  # e4m3: t = sum a (8 + q/16) = 8 RS + (sum a q) / 16
    ZB: tl.constexpr = OFF if INT8 else OFF + 128  # z = d + OFF, and e4m3's 16 * 8 RS
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for g in range(g_lo, g_hi):
        if INT8:
            t = tl.zeros((BM, BN), dtype=tl.int32)
        else:
            t = tl.zeros((BM, BN), dtype=tl.float32)
        for i in tl.static_range(BK // 8):
            w = tl.load(wq_ptr + (g * (BK // 8) + i) * N + cols, mask=mask_w, other=0)
            if BITS == 5:
                x = tl.load(wh_ptr + (g * (BK // 8) + i) * N + cols, mask=mask_w, other=0).to(tl.int32)
            a = tl.load(a_rows + g * (BK // 8) + i)[:, None]  # activation bytes k = 8i .. 8i+7
            if INT8:
                lo, hi = nibble_bytes(w, PTX)
                if BITS == 5:
                    lo |= spread4(x & 15)
                    hi |= spread4((x >> 4) & 15)
                t = dot4(a.to(tl.int32), lo, t, PTX)
                t = dot4((a >> 32).to(tl.int32), hi, t, PTX)
            else:  # codes by byte: even nibbles (e), odd (o); int5 their fifth bits at bit 4
                e = w & 0x0F0F0F0F
                o = (w >> 4) & 0x0F0F0F0F
                if BITS == 5:
                    e |= spread_even(x)
                    o |= spread_even(x >> 1)
                for h in tl.static_range(2):  # codes 4h .. 4h+3
                    v = e4m3x4((a >> (32 * h)).to(tl.int32), PTX)
                    for jj in tl.static_range(4):
                        if jj % 2:
                            c = biased_code(o, 2 * h + jj // 2, PTX)
                        else:
                            c = biased_code(e, 2 * h + jj // 2, PTX)
                        t += v[jj] * c
        sz = tl.load(sz_ptr + g * N + cols, mask=mask_w, other=0)
        s = sz_scale(sz)
        sz0 = s * ((sz >> 16) + ZB).to(tl.float32)
        rs = tl.load(rs_rows + g)
        contrib = t.to(tl.float32) * (s * TS) - rs[:, None] * sz0
        if GROUP_AS:
            acc += tl.load(as_rows + g)[:, None] * contrib
        else:
            acc += contrib
    if TRIGGER:  # as the mma2 kernel: the next launch (the next producer, a programmatic dependent) may start
        gdc_launch_dependents()
    if not GROUP_AS:
        acc *= tl.load(as_rows)[:, None]
    store_tile(acc, ws_ptr, out_ptr, cnt_ptr, offs_m, offs_n, mask_m, mask_n, M, N, stride_om, SPLIT, not HW, RW)
