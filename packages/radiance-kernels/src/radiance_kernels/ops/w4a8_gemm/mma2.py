"""Decode W4A8 GEMM on register-fed ``mma.sync`` (Gluon; NVIDIA sm_89+ for e4m3, sm_80+ for int8 activations):
int4 weights.

The Triton loops stage every MMA operand they build in registers through shared memory (a layout conversion behind
barriers, per dot); here the layouts are explicit, so both operands are *loaded* in the m16n8k16 fragment layouts and
converted in registers: no shared memory, no barrier in the loop. Math as :mod:`.reference` with the signed code
``c = q - 8`` (``sum a*q - z*RS = sum a*c - d*RS``), one 128-group per loop step::

    t[m, n] = sum_{k in g} a[m, k] * c[k, n]        (8 mma.sync m16n8k16, fp16 operands exact, fp32 sums)
    acc[m, n] += as(m, g) * (s[g, n] * t - s[g, n] * d[g, n] * RS[m, g])

K order inside a group: the MMA's reduction index is ours to choose, so slot ``s`` of step (half ``h``, nibble pair
``j``) is code ``8 (8h + s // 2) + j + 4 (s % 2)`` — word row ``8h + s // 2`` of ``wq``, nibble ``j`` (even ``s``) or
``j + 4`` (odd ``s``). A thread's fragment pair (slots ``2t``, ``2t + 1``) is then one word: ``(w >> 4j) & 0x000F000F
| 0x64006400`` is the fp16 pair ``1024 + q`` (one shift, one ``lop3``), minus ``1032`` (one ``sub.f16x2``) the pair
of signed codes. Its activation pair is bytes ``j`` and ``j + 4`` of one 8-byte activation word (one ``prmt``, then
``cvt.rn.f16x2.e4m3x2``; int8 by the same ``1024 +`` trick). Loads: ``wq`` words by the B fragment (a thread's 4-byte
words of rows ``8h + t``, ``8h + t + 4``), activation words by the A fragment (L1-resident; both pair slots name the
same word, one load). ``PF`` (0-2): how many groups ahead the fragments are loaded.

NVIDIA-only (inline PTX, Gluon's ``mma_v2``); the portable twin is the Triton nib8 loop (:mod:`.triton`), the same
math and weight layout. Tile: 16 tokens x ``BN`` columns, warps side by side along N; splits and the split-order
reduction as the Triton decode band. Not runnable under the interpreter: tested on GPUs against the reference.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # Triton 3.7 / 3.6 name


@gluon.jit
def _code_pair(w, J: gl.constexpr):
    """fp16 pairs (nibble J, nibble J + 4) - 8 of int32 words (one asm per fragment pair: both elements one word)."""
    if J == 0:
        r = gl.inline_asm_elementwise(
            "{ .reg .b32 t, c; lop3.b32 t, $1, 0x000F000F, 0x64006400, 0xEA; mov.b32 c, 0x64086408;"
            " sub.rn.f16x2 $0, t, c; }", "=r,r,r", [w], dtype=gl.float16, is_pure=True, pack=2)
    elif J == 1:
        r = gl.inline_asm_elementwise(
            "{ .reg .b32 t, c; shr.b32 t, $1, 4; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA;"
            " mov.b32 c, 0x64086408; sub.rn.f16x2 $0, t, c; }", "=r,r,r", [w], dtype=gl.float16, is_pure=True, pack=2)
    elif J == 2:
        r = gl.inline_asm_elementwise(
            "{ .reg .b32 t, c; shr.b32 t, $1, 8; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA;"
            " mov.b32 c, 0x64086408; sub.rn.f16x2 $0, t, c; }", "=r,r,r", [w], dtype=gl.float16, is_pure=True, pack=2)
    else:
        r = gl.inline_asm_elementwise(
            "{ .reg .b32 t, c; shr.b32 t, $1, 12; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA;"
            " mov.b32 c, 0x64086408; sub.rn.f16x2 $0, t, c; }", "=r,r,r", [w], dtype=gl.float16, is_pure=True, pack=2)
    return r


@gluon.jit
def _act_pair(a, J: gl.constexpr, INT8: gl.constexpr):
    """fp16 pairs (byte J, byte J + 4) of int64 activation words: e4m3 codes by the hardware convert, int8 as
    ``1024 + (b ^ 128)`` minus 1152."""
    if INT8:
        if J == 0:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x, c; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x7440;"
                " and.b32 x, x, 0x00FF00FF; xor.b32 x, x, 0x00800080; or.b32 x, x, 0x64006400; mov.b32 c, 0x64806480;"
                " sub.rn.f16x2 $0, x, c; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True, pack=2)
        elif J == 1:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x, c; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x7541;"
                " and.b32 x, x, 0x00FF00FF; xor.b32 x, x, 0x00800080; or.b32 x, x, 0x64006400; mov.b32 c, 0x64806480;"
                " sub.rn.f16x2 $0, x, c; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True, pack=2)
        elif J == 2:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x, c; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x7642;"
                " and.b32 x, x, 0x00FF00FF; xor.b32 x, x, 0x00800080; or.b32 x, x, 0x64006400; mov.b32 c, 0x64806480;"
                " sub.rn.f16x2 $0, x, c; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True, pack=2)
        else:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x, c; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x7743;"
                " and.b32 x, x, 0x00FF00FF; xor.b32 x, x, 0x00800080; or.b32 x, x, 0x64006400; mov.b32 c, 0x64806480;"
                " sub.rn.f16x2 $0, x, c; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True, pack=2)
    else:
        if J == 0:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x; .reg .b16 p; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x40;"
                " cvt.u16.u32 p, x; cvt.rn.f16x2.e4m3x2 $0, p; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True,
                pack=2)
        elif J == 1:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x; .reg .b16 p; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x51;"
                " cvt.u16.u32 p, x; cvt.rn.f16x2.e4m3x2 $0, p; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True,
                pack=2)
        elif J == 2:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x; .reg .b16 p; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x62;"
                " cvt.u16.u32 p, x; cvt.rn.f16x2.e4m3x2 $0, p; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True,
                pack=2)
        else:
            r = gl.inline_asm_elementwise(
                "{ .reg .b32 lo, hi, x; .reg .b16 p; mov.b64 {lo, hi}, $1; prmt.b32 x, lo, hi, 0x73;"
                " cvt.u16.u32 p, x; cvt.rn.f16x2.e4m3x2 $0, p; }", "=r,l,l", [a], dtype=gl.float16, is_pure=True,
                pack=2)
    return r


@gluon.constexpr_function
def _run_layout(BN, NW):
    """``[8 word rows, BN columns]`` of ``wq`` with each thread's four B-fragment column repeats adjacent (one
    16-byte load per row): the B fragment's thread map (lane bits 0-1 the row, 2-4 the column, rows ``t``, ``t + 4``
    in registers) over the runs of four columns."""
    reps = BN // (8 * NW) // 4
    reg = [[0, 1], [0, 2], [4, 0]] + [[0, 32 * NW << k] for k in range(reps.bit_length() - 1)]
    lane = [[1, 0], [2, 0], [0, 4], [0, 8], [0, 16]]
    warp = [[0, 32 << k] for k in range(NW.bit_length() - 1)]
    return gl.DistributedLinearLayout(reg, lane, warp, [], [8, BN])


@gluon.jit
def _b_words(ptrs, mask, LB: gl.constexpr, V16: gl.constexpr):
    """One half's B-fragment words ``[16 slots, BN]`` (slot ``s``: word row ``s // 2``). ``V16``: ``ptrs`` address
    ``[8 rows, BN]`` by run (:func:`_run_layout`); the runs are regrouped in registers so that fragment column ``n``
    holds the weight column :func:`_column` gives."""
    w = gl.load(ptrs, mask=mask, other=0)
    if V16:
        BN: gl.constexpr = w.shape[1]
        NW: gl.constexpr = gl.num_warps()
        w = gl.reshape(gl.permute(gl.reshape(w, [8, BN // (32 * NW), NW, 8, 4]), [0, 1, 4, 2, 3]), [8, BN])
        w = gl.reshape(gl.permute(gl.join(w, w), [0, 2, 1]), [16, BN])
        w = gl.convert_layout(w, LB, assert_trivial=True)
    return w


@gluon.jit
def _column(n, V16: gl.constexpr, NW: gl.constexpr):
    """Weight column of fragment column ``n`` within its tile: ``n`` itself, or with ``V16`` (``n = ((4 i_hi +
    i_lo) NW + w) 8 + c``) the run position ``((i_hi NW + w) 8 + c) 4 + i_lo``."""
    if V16:
        i = n // (8 * NW)
        n = (((i // 4) * NW + (n // 8) % NW) * 8 + n % 8) * 4 + i % 4
    return n


@gluon.jit
def _fragments(w_ptrs, w_mask, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g, valid, LB: gl.constexpr,
               V16: gl.constexpr, GROUP_AS: gl.constexpr):
    """Everything group g's step reads, zeros if not valid: weight words (halves 0 / 1, B fragments), activation
    words (A fragments), the weights' scale / zero words, the activations' row sums and (GROUP_AS) scales."""
    w0 = _b_words(w_ptrs + g * 16 * N, w_mask & valid, LB, V16)
    w1 = _b_words(w_ptrs + (g * 16 + 8) * N, w_mask & valid, LB, V16)
    a0 = gl.load(a_ptrs + g * 16, mask=valid, other=0)
    a1 = gl.load(a_ptrs + g * 16 + 8, mask=valid, other=0)
    sz = gl.load(sz_ptrs + g * N, mask=mask_n & valid, other=0)
    rs = gl.load(rs_rows + g, mask=valid, other=0.0)
    if GROUP_AS:
        ag = gl.load(as_rows + g, mask=valid, other=0.0)
    else:
        ag = rs
    return w0, w1, a0, a1, sz, rs, ag


@gluon.jit
def _w4a8_mma2_kernel(
    a_ptr, as_ptr, rs_ptr, wq_ptr, wh_ptr, sz_ptr, ws_ptr, out_ptr, cnt_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    BITS: gl.constexpr, INT8: gl.constexpr, GROUP_AS: gl.constexpr, SPLIT: gl.constexpr, RW: gl.constexpr,
    HW: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, PF: gl.constexpr = 0,
    V16: gl.constexpr = False,
):
    NW: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NW], instr_shape=[16, 8])
    LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    LB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    gl.static_assert(BITS == 4 and BM == 16 and BK == 128)
    n0 = gl.program_id(0) * BN
    part = (n0 >= b1).to(gl.int32) + (n0 >= b2).to(gl.int32)
    G = K // BK
    g_lo = gl.program_id(1) * groups_per_split
    g_hi = gl.minimum(g_lo + groups_per_split, G)
    # B fragments: words [16 slots, BN] (slot s: word row s // 2 of the half), or [8 rows, BN] by run (V16)
    if V16:
        LW: gl.constexpr = _run_layout(BN, NW)
        rb = gl.arange(0, 8, layout=gl.SliceLayout(1, LW))
        nb = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, LW))
    else:
        rb = gl.arange(0, 16, layout=gl.SliceLayout(1, LB)) // 2
        nb = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, LB))
    w_ptrs = wq_ptr + rb[:, None] * N + nb[None, :]
    w_mask = (rb >= 0)[:, None] & (nb < N)[None, :]
    # A fragments: activation words [16 tokens, 16 slots] (slot s: word row s // 2 of the half), rows clamped
    ma = gl.arange(0, BM, layout=gl.SliceLayout(1, LA))
    sa = gl.arange(0, 16, layout=gl.SliceLayout(0, LA))
    a64 = a_ptr.to(gl.pointer_type(gl.int64)) + part.to(gl.int64) * M * (K // 8)
    a_ptrs = a64 + (gl.minimum(ma, M - 1).to(gl.int64) * (K // 8))[:, None] + (sa // 2)[None, :]
    # accumulator frame
    mo = gl.arange(0, BM, layout=gl.SliceLayout(1, MMA))
    no = n0 + _column(gl.arange(0, BN, layout=gl.SliceLayout(0, MMA)), V16, NW)
    mask_m = mo < M
    mask_n = no < N
    rows = gl.minimum(mo, M - 1)
    if GROUP_AS:
        as_rows = as_ptr + part * M * G + rows * G
    else:
        as_rows = as_ptr + part * M + rows
    rs_rows = rs_ptr + part * M * G + rows * G
    acc = gl.zeros([BM, BN], gl.float32, MMA)
    sz_ptrs = sz_ptr + no
    if PF >= 1:  # group g + PF's loads are issued before group g's MMAs
        f = _fragments(w_ptrs, w_mask, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g_lo, g_lo < g_hi, LB, V16,
                       GROUP_AS)
    if PF == 2:
        fb = _fragments(w_ptrs, w_mask, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g_lo + 1, g_lo + 1 < g_hi, LB,
                        V16, GROUP_AS)
    for g in range(g_lo, g_hi):
        if PF == 0:
            f = _fragments(w_ptrs, w_mask, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g, g < g_hi, LB, V16,
                           GROUP_AS)
        else:
            fn = _fragments(w_ptrs, w_mask, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g + PF, g + PF < g_hi, LB,
                            V16, GROUP_AS)
        w0, w1, a0, a1, sz, rs, ag = f
        t = gl.zeros([BM, BN], gl.float32, MMA)
        for j in gl.static_range(4):
            t = mma_v2(_act_pair(a0, j, INT8), _code_pair(w0, j), t)
        for j in gl.static_range(4):
            t = mma_v2(_act_pair(a1, j, INT8), _code_pair(w1, j), t)
        s = (sz & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
        sd = s * (sz >> 16).to(gl.float32)
        contrib = t * s[None, :] - rs[:, None] * sd[None, :]
        if GROUP_AS:
            acc += ag[:, None] * contrib
        else:
            acc += contrib
        if PF == 1:
            f = fn
        elif PF == 2:
            f = fb
            fb = fn
    if not GROUP_AS:
        acc *= gl.load(as_rows)[:, None]
    mask = mask_m[:, None] & mask_n[None, :]
    out = out_ptr + mo[:, None] * stride_om + no[None, :]
    if SPLIT == 0:
        gl.store(out, acc.to(gl.bfloat16), mask=mask)
    else:
        part_ptrs = ws_ptr + mo[:, None] * N + no[None, :]
        S = gl.num_programs(1)
        gl.store(part_ptrs + gl.program_id(1).to(gl.int64) * M * N, acc, mask=mask)
        _barrier()  # every thread's partial is written before the release below
        if gl.atomic_add(cnt_ptr + gl.program_id(0), 1, sem="acq_rel", scope="gpu") == S - 1:
            total = gl.zeros([BM, BN], gl.float32, MMA)
            for i0 in range(0, S, RW):  # RW partials per L2 round trip, added in split order
                for r in gl.static_range(RW):
                    live = i0 + r < S
                    p = gl.load(part_ptrs + (i0 + r) * M * N, mask=mask & live, other=0.0, cache_modifier=".cg")
                    total = gl.where(live, total + p, total)
            gl.store(out, total.to(gl.bfloat16), mask=mask)
