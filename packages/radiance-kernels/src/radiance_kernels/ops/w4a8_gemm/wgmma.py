"""Prefill W4A8 / W5A8 GEMM on Hopper's asynchronous ``wgmma`` (Gluon; NVIDIA sm_90): the ``wgmma`` configs of
:data:`.triton.PREFILL`, every weight width and activation element.

Operands: the call's 8-bit weight copy ``w8 [N, K]`` (:func:`.triton.unpack_w8`: ``c = q - 2^(b-1)``, int8 or e4m3,
exact) and the activation codes ``A [P, M, K]``, both K-contiguous, brought by TMA into a ``STAGES``-deep ring of
shared-memory tiles ``[BM, 128]`` / ``[BN, 128]`` (one 128-group per stage); the same launch of the unpack writes
the fold's column factors ``sc`` (``s``, ``s d`` per group; int8: ``s``, ``-1.5 * 2^23 * s``), which ride a second
ring of ``[BN]`` tiles. Per group ``g`` one asynchronous ``warpgroup_mma`` from shared memory gives the exact group
sum (int32 for int8, fp32 for e4m3 — per-group promotion, as the library's block-scaled GEMM)::

    t[m, n] = sum_{k in g} a[m, k] * c[k, n]
    acc[m, n] += as(m, g) * (s[g, n] * t - s[g, n] * d[g, n] * RS[m, g])      (d = z - 2^(b-1): sz's high half)

— the reference's math in the Triton loop's in-loop form (``zpe`` gives the same sums; it is not read). Where the
8-bit operand holds ``q - z`` exactly (:func:`zero_folds`: int8 activations, or int4 weights) the unpack folds the zero
in and the row-sum term drops out (one FMA less per element and group). A fold reads only sums whose MMAs a
``wait_group 0`` retired — with a fold beside MMAs still in flight after ``wait_group 1``, ptxas (C7514) serialises
every wgmma of the kernel (sessions 7-21's schedule, ``_FOLD_BESIDE_MMA``). The ws form still folds beside its next
group's MMAs, issued before the fold into the other sums' registers; the per-tile form folds after its MMAs and
leans on the SM's other program (registers: two ``[BM, BN]`` group sums and the accumulator, 64 each per thread at
128 x 128 — the register file is what caps the tile); the folded group's operand stage is refilled
before its fold (which reads only its scales), and each group's row inputs are loaded a group ahead. int8 sums reach
fp32 by the exponent trick (``|t| < 2^22``: an integer add, no quarter-rate convert), the offset taken out inside
the FMA that scales them (:func:`_fold`: three operations per element and group). Tiles in
grouped launch order; each N-block reads its partition's activation rows (``n0 >= b1``, ``n0 >= b2``); rows past M
of a partition read the next partition's (or TMA's zeros): only their own output rows, which are not stored.

Two forms of one pipeline: :func:`_w4a8_wgmma_kernel` (a program per tile, every warp loading and folding, CTA
barriers around each refill; configs ``wgmma`` / ``wgmmam64``) and :func:`_w4a8_wgmma_ws_kernel` (``ws``: a program
per SM walking its tiles, a loader warp, two 64-row MMA warpgroups handing stages back by mbarrier arrivals; config
``wgmmaws``). NVIDIA Hopper only; the portable twin is the Triton ``predeq`` loop (:mod:`.triton`), same operand and
math.
"""

from __future__ import annotations

from functools import cache

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.w4a8_gemm import tma_tiles
from radiance_kernels.ops.w4a8_gemm.reference import GROUP

_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # Triton 3.7 / 3.6 name
#: The ws kernel's registers: 3 warpgroups x 128 threads x 168 at launch (<= 65536), then the loader's warpgroup drops
#: to 24 and the two MMA warpgroups rise to 240 (ptxas caps the MMA partitions there).
WS_LAUNCH_REGS, WS_MMA_REGS = 168, 240
#: 1: a group's fold reads its sums while the next group's MMAs run (``wgmma.wait_group 1``) — ptxas (sm_90, C7514)
#: then serialises every wgmma of the kernel, each k32 instruction waiting for the one before; 0: the fold waits for
#: every MMA in flight (``wait_group 0``), the MMAs of a group issue back to back, and the other warpgroup's (ws) or
#: program's MMAs fill the tensor cores during the fold
_FOLD_BESIDE_MMA = gl.constexpr(0)
_MAGIC = gl.constexpr(0x4B400000)  # fp32 1.5 * 2^23: (t + _MAGIC) as fp32 is 1.5 * 2^23 + t for |t| < 2^22


@gluon.constexpr_function
def _instr_n(BN, INT8):
    """The wgmma instruction's N: the tile's N, at most 128 for 8-bit integers (their N set stops at 224)."""
    return min(BN, 128) if INT8 else BN


@gluon.constexpr_function
def _factor_rows(INT8, ZFOLD):
    """How many of a group's column-factor rows the fold reads: ``s`` and ``s d`` (int8: ``-1.5 * 2^23 * s``); e4m3
    with the zero folded in, ``s`` alone."""
    return 2 if INT8 or not ZFOLD else 1


@gluon.jit
def _tile(t, M, N, b1, b2, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    """Tile ``t`` in grouped order (GROUP_M row blocks per column sweep): its first row and column, and the
    activation partition its N-block reads (``n0 >= b1``, ``n0 >= b2``)."""
    width = GROUP_M * gl.cdiv(N, BN)
    first_m = (t // width) * GROUP_M
    rows = gl.minimum(gl.cdiv(M, BM) - first_m, GROUP_M)
    off_m = (first_m + (t % width) % rows) * BM
    off_n = ((t % width) // rows) * BN
    return off_m, off_n, (off_n >= b1).to(gl.int32) + (off_n >= b2).to(gl.int32)


@gluon.jit
def _row_loads(rows_in, g, GROUP_AS: gl.constexpr, ZFOLD: gl.constexpr):
    """Group g's row inputs: the activations' row sums (not with ZFOLD) and (GROUP_AS) scales."""
    rs_ptr, as_ptr, rows, G, mask_m = rows_in
    if ZFOLD:
        rs = gl.where(mask_m, 0.0, 0.0)
    else:
        rs = gl.load(rs_ptr + (rows * G + g), mask=mask_m, other=0.0)
    if GROUP_AS:
        ag = gl.load(as_ptr + (rows * G + g), mask=mask_m, other=0.0)
    else:
        ag = rs
    return rs, ag


@gluon.jit
def _row_inputs(rs_ptr, as_ptr, offs_m, part, M, G):
    """The tile rows' inputs: the row-sum and activation-scale bases, each row's index ``r`` in them (partition
    ``part``'s rows; group ``g`` of row ``r`` at ``r G + g``, a per-token scale at ``r``) — a 32-bit register per row
    beside the fold, not a 64-bit pointer —, G and the rows' mask."""
    return rs_ptr, as_ptr, part * M + offs_m, G, offs_m < M


@gluon.jit
def _store(acc, rows_in, offs_m, off_n, N, out_ptr, stride_om, GROUP_AS: gl.constexpr, COL: gl.constexpr):
    """The tile's bf16 output (per-token activation scales applied here); rows past M, columns past N untouched. The
    columns' indices are made here, after the group loop, so they are not live beside the fold."""
    offs_n = off_n + gl.arange(0, acc.shape[1], layout=COL)
    rs_ptr, as_ptr, rows, G, mask_m = rows_in
    if not GROUP_AS:
        acc *= gl.load(as_ptr + rows, mask=mask_m, other=0.0)[:, None]
    out = out_ptr + offs_m.to(gl.int64)[:, None] * stride_om + offs_n[None, :]
    gl.store(out, acc.to(gl.bfloat16), mask=mask_m[:, None] & (offs_n < N)[None, :])


@gluon.jit
def _weight_ring(w_desc, sc_desc, STAGES: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, COUNT: gl.constexpr):
    """The stages' weight tiles, their column-factor rows (``s``, ``s d``) and two barriers per stage (the second
    counting COUNT arrivals)."""
    w_s = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    s_s = gl.allocate_shared_memory(sc_desc.dtype, [STAGES, BN], sc_desc.layout)
    sd_s = gl.allocate_shared_memory(sc_desc.dtype, [STAGES, BN], sc_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    bars2 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
        mbarrier.init(bars2.index(i), count=COUNT)
    return w_s, s_s, sd_s, bars, bars2


@gluon.jit
def _scales_to_shared(sc_desc, s_s, sd_s, sbars, st, g, off_n, N, pred, ROWS: gl.constexpr):
    """TMA group g's column factors (rows 2g, 2g + 1 of ``sc``, flat; ROWS 1: row 2g only) into stage ``st`` of their
    own ring."""
    mbarrier.expect(sbars.index(st), ROWS * sc_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(sc_desc, [2 * g * N + off_n], sbars.index(st), s_s.index(st), pred=pred)
    if ROWS == 2:
        tma.async_copy_global_to_shared(sc_desc, [(2 * g + 1) * N + off_n], sbars.index(st), sd_s.index(st),
                                        pred=pred)


@gluon.jit
def _operands_to_shared(a_desc, w_desc, a_s, w_s, bars, st, g, a_row, off_n, BK: gl.constexpr, pred):
    """TMA group g's activation and weight tiles into stage ``st``."""
    mbarrier.expect(bars.index(st), a_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [a_row, g * BK], bars.index(st), a_s.index(st), pred=pred)
    tma.async_copy_global_to_shared(w_desc, [off_n, g * BK], bars.index(st), w_s.index(st), pred=pred)


@gluon.jit
def _fold(acc, t, s_sh, sd_sh, rows, INT8: gl.constexpr, GROUP_AS: gl.constexpr, COL: gl.constexpr,
          ZFOLD: gl.constexpr):
    """``acc + as * (s t - s d RS)`` for one group's sums ``t``, its column factors in shared memory and its row
    inputs. ZFOLD (the zero inside the operand, ``t`` the sums of ``a (q - z)``): ``acc + as * s t``. int8 (always
    ZFOLD): the second factor is ``-1.5 * 2^23 * s`` and ``s t`` is one FMA off the exponent trick's float
    ``f = 1.5 * 2^23 + t`` (an integer add): ``fma(f, s, -1.5 * 2^23 * s)``, exact before its one rounding (``s`` is
    fp16, so ``1.5 * 2^23 * s`` is exact in fp32) — three operations per element with the FMA into ``acc``."""
    s = s_sh.load(COL)
    rs, ag = rows
    if INT8:
        f = (t + _MAGIC).to(gl.float32, bitcast=True)
        f, s2 = gl.broadcast(f, s[None, :])
        f, c2 = gl.broadcast(f, sd_sh.load(COL)[None, :])
        st = gl.fma(f, s2, c2)
        if GROUP_AS:
            st, a2 = gl.broadcast(st, ag[:, None])
            acc = gl.fma(st, a2, acc)
        else:
            acc += st
    else:
        if not ZFOLD:
            sd = sd_sh.load(COL)
            if GROUP_AS:
                acc -= sd[None, :] * (ag * rs)[:, None]
            else:
                acc -= sd[None, :] * rs[:, None]
        if GROUP_AS:
            acc += (ag[:, None] * s[None, :]) * t
        else:
            acc += s[None, :] * t
    return acc


@gluon.jit
def _step(acc, t, f, g, G, PENDING: gl.constexpr, descs, ring, tile, INT8: gl.constexpr, GROUP_AS: gl.constexpr,
          COL: gl.constexpr, STAGES: gl.constexpr, BK: gl.constexpr, ZFOLD: gl.constexpr, ISSUE: gl.constexpr):
    """Fold group g (its MMA ``t``; PENDING: MMAs issued after it, left in flight only with ``_FOLD_BESIDE_MMA``),
    refill its stage with group g + STAGES (the operand tiles before the fold, which reads only the scales: 5-7 %
    faster than after on 128x128, H200 call 47) and (ISSUE) start group g + 2's MMA in ``t``'s registers: (acc, the
    new ``t``, group g + 1's row inputs). ``descs``: the three TMA descriptors; ``ring``: the stages' tiles and
    barriers; ``tile``: the program's activation row, column, N and row inputs (:func:`_row_inputs`)."""
    a_desc, w_desc, sc_desc = descs
    a_s, w_s, s_s, sd_s, bars, sbars = ring
    a_row, off_n, N, rows_in = tile
    st = g % STAGES
    tw = warpgroup_mma_wait(num_outstanding=PENDING * _FOLD_BESIDE_MMA, deps=(t,))
    fn = _row_loads(rows_in, gl.minimum(g + 1, G - 1), GROUP_AS, ZFOLD)
    refill = g + STAGES < G
    if ISSUE:
        _barrier()  # every warpgroup's MMA of group g is done: its operand tiles can go
        _operands_to_shared(a_desc, w_desc, a_s, w_s, bars, st, g + STAGES, a_row, off_n, BK, refill)
    mbarrier.wait(sbars.index(st), (g // STAGES) & 1)
    acc = _fold(acc, tw, s_s.index(st), sd_s.index(st), f, INT8, GROUP_AS, COL, ZFOLD)
    if ISSUE:
        _barrier()  # every warp is done with group g's scales
        _scales_to_shared(sc_desc, s_s, sd_s, sbars, st, g + STAGES, off_n, N, refill, _factor_rows(INT8, ZFOLD))
        nx = (g + 2) % STAGES
        mbarrier.wait(bars.index(nx), ((g + 2) // STAGES) & 1)
        t = warpgroup_mma(a_s.index(nx), w_s.index(nx).permute((1, 0)), tw, use_acc=False, is_async=True)
    else:
        t = tw
    return acc, t, fn


@gluon.jit
def _w4a8_wgmma_kernel(
    a_desc, w_desc, sc_desc, as_ptr, rs_ptr, out_ptr, M, N, K, b1, b2, stride_om,
    INT8: gl.constexpr, GROUP_AS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, BK: gl.constexpr, ZFOLD: gl.constexpr,
):
    NW: gl.constexpr = gl.num_warps()
    gl.static_assert(BM == 16 * NW, "one 16-row slice per warp: BM = 16 x num_warps")
    gl.static_assert(STAGES >= 3, "groups g, g + 1 in flight and g + 2 loaded")
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                  instr_shape=[16, _instr_n(BN, INT8), 32])
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    COL: gl.constexpr = gl.SliceLayout(0, MMA)
    off_m, off_n, part = _tile(gl.program_id(0), M, N, b1, b2, BM, BN, GROUP_M)
    G = K // BK
    a_row = part * M + off_m

    a_s = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    w_s, s_s, sd_s, bars, sbars = _weight_ring(w_desc, sc_desc, STAGES, BN, BK, 1)
    for i in gl.static_range(STAGES):  # group i in stage i
        _operands_to_shared(a_desc, w_desc, a_s, w_s, bars, i, i, a_row, off_n, BK, i < G)
        _scales_to_shared(sc_desc, s_s, sd_s, sbars, i, i, off_n, N, i < G, _factor_rows(INT8, ZFOLD))

    offs_m = off_m + gl.arange(0, BM, layout=ROW)
    rows_in = _row_inputs(rs_ptr, as_ptr, offs_m, part, M, G)
    zero = gl.zeros([BM, BN], gl.int32 if INT8 else gl.float32, MMA)
    acc = gl.zeros([BM, BN], gl.float32, MMA)

    descs = (a_desc, w_desc, sc_desc)
    ring = (a_s, w_s, s_s, sd_s, bars, sbars)
    tile = (a_row, off_n, N, rows_in)
    # group g + 2's MMA writes the registers group g's fold freed; two steps per trip, so the two sums' registers
    # keep their roles (G even)
    mbarrier.wait(bars.index(0), 0)
    t_a = warpgroup_mma(a_s.index(0), w_s.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
    mbarrier.wait(bars.index(1), 0)
    t_b = warpgroup_mma(a_s.index(1), w_s.index(1).permute((1, 0)), zero, use_acc=False, is_async=True)
    f = _row_loads(rows_in, 0, GROUP_AS, ZFOLD)
    for g in range(0, G - 2, 2):
        acc, t_a, f = _step(acc, t_a, f, g, G, 1, descs, ring, tile, INT8, GROUP_AS, COL, STAGES, BK, ZFOLD, True)
        acc, t_b, f = _step(acc, t_b, f, g + 1, G, 1, descs, ring, tile, INT8, GROUP_AS, COL, STAGES, BK, ZFOLD, True)
    acc, t_a, f = _step(acc, t_a, f, G - 2, G, 1, descs, ring, tile, INT8, GROUP_AS, COL, STAGES, BK, ZFOLD, False)
    acc, t_b, f = _step(acc, t_b, f, G - 1, G, 0, descs, ring, tile, INT8, GROUP_AS, COL, STAGES, BK, ZFOLD, False)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
        mbarrier.invalidate(sbars.index(i))
    _store(acc, rows_in, offs_m, off_n, N, out_ptr, stride_om, GROUP_AS, COL)


@gluon.jit
def _ws_issue(a_s, w_s, ready, c, h: gl.constexpr, t, STAGES: gl.constexpr):
    """Start the MMA of the program's c-th group (stage ``c % STAGES``, activation half h) in ``t``'s registers once
    the stage has landed."""
    st = c % STAGES
    mbarrier.wait(ready.index(st), (c // STAGES) & 1)
    return warpgroup_mma(a_s.index(2 * st + h), w_s.index(st).permute((1, 0)), t, use_acc=False, is_async=True)


@gluon.jit
def _ws_step(acc, t, t_free, f, c, g, G, ring, rows_in, h: gl.constexpr, INT8: gl.constexpr, GROUP_AS: gl.constexpr,
             COL: gl.constexpr, STAGES: gl.constexpr, ZFOLD: gl.constexpr, ISSUE: gl.constexpr):
    """One group of a warpgroup of the warp-specialised kernel (the tile's first group is the program's c-th):
    (ISSUE) start group g + 1's MMA in ``t_free``'s registers, fold group g from ``t`` (its MMA already retired), hand
    its stage back to the loader, then wait for group g + 1's MMA — the fold never reads the registers of an MMA in
    flight, so ptxas keeps the wgmmas asynchronous. Returns (acc, group g + 1's sums, its row inputs)."""
    a_s, w_s, s_s, sd_s, ready, empty = ring
    st = (c + g) % STAGES
    if ISSUE:
        t_next = _ws_issue(a_s, w_s, ready, c + g + 1, h, t_free, STAGES)
    else:
        t_next = t_free
    fn = _row_loads(rows_in, gl.minimum(g + 1, G - 1), GROUP_AS, ZFOLD)
    acc = _fold(acc, t, s_s.index(st), sd_s.index(st), f, INT8, GROUP_AS, COL, ZFOLD)
    _barrier()  # this warpgroup's warps are done with the stage: their MMA and their scale loads
    fence_async_shared()  # the scale loads ordered before the loader's TMA overwrites them
    mbarrier.arrive(empty.index(st), count=1)
    if ISSUE:
        t_next = warpgroup_mma_wait(num_outstanding=0, deps=(t_next,))
    return acc, t_next, fn


@gluon.jit
def _ws_load(ring, descs, dims, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, BK: gl.constexpr,
             ROWS: gl.constexpr, STAGES: gl.constexpr):
    """The loader warp: every group of every tile of this program, in order, into the next free stage (both
    activation halves, the weight tile, the column factors), one ``ready`` barrier per stage."""
    a_desc, w_desc, sc_desc = descs
    a_s, w_s, s_s, sd_s, ready, empty = ring
    M, N, K, b1, b2, stride_om = dims
    G = K // BK
    nbytes: gl.constexpr = (2 * a_desc.block_type.nbytes + w_desc.block_type.nbytes
                            + ROWS * sc_desc.block_type.nbytes)
    c = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BM) * gl.cdiv(N, BN), gl.num_programs(0)):
        off_m, off_n, part = _tile(tile, M, N, b1, b2, BM, BN, GROUP_M)
        a_row = part * M + off_m
        for g in range(G):
            st = c % STAGES
            mbarrier.wait(empty.index(st), ((c // STAGES) & 1) ^ 1)  # a fresh barrier passes phase 1
            bar = ready.index(st)
            mbarrier.expect(bar, nbytes)
            tma.async_copy_global_to_shared(a_desc, [a_row, g * BK], bar, a_s.index(2 * st))
            tma.async_copy_global_to_shared(a_desc, [a_row + BM // 2, g * BK], bar, a_s.index(2 * st + 1))
            tma.async_copy_global_to_shared(w_desc, [off_n, g * BK], bar, w_s.index(st))
            tma.async_copy_global_to_shared(sc_desc, [2 * g * N + off_n], bar, s_s.index(st))
            if ROWS == 2:
                tma.async_copy_global_to_shared(sc_desc, [(2 * g + 1) * N + off_n], bar, sd_s.index(st))
            c += 1


@gluon.jit
def _ws_mma(ring, ptrs, dims, h: gl.constexpr, INT8: gl.constexpr, GROUP_AS: gl.constexpr, BM: gl.constexpr,
            BN: gl.constexpr, GROUP_M: gl.constexpr, BK: gl.constexpr, ZFOLD: gl.constexpr, STAGES: gl.constexpr):
    """One MMA warpgroup: rows ``h BM/2 ..`` of every tile of this program, each group's fold beside the next group's
    MMAs (:func:`_ws_step`), then its half tile stored."""
    as_ptr, rs_ptr, out_ptr = ptrs
    M, N, K, b1, b2, stride_om = dims
    BMW: gl.constexpr = BM // 2
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                  instr_shape=[16, _instr_n(BN, INT8), 32])
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    COL: gl.constexpr = gl.SliceLayout(0, MMA)
    a_s, w_s = ring[0], ring[1]
    ready = ring[4]
    G = K // BK
    zero = gl.zeros([BMW, BN], gl.int32 if INT8 else gl.float32, MMA)
    c = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BM) * gl.cdiv(N, BN), gl.num_programs(0)):
        off_m, off_n, part = _tile(tile, M, N, b1, b2, BM, BN, GROUP_M)
        offs_m = off_m + h * BMW + gl.arange(0, BMW, layout=ROW)
        rows_in = _row_inputs(rs_ptr, as_ptr, offs_m, part, M, G)
        acc = gl.zeros([BMW, BN], gl.float32, MMA)
        t_a = warpgroup_mma_wait(num_outstanding=0, deps=(_ws_issue(a_s, w_s, ready, c, h, zero, STAGES),))
        t_b = zero
        f = _row_loads(rows_in, 0, GROUP_AS, ZFOLD)
        # two steps per trip, so the two sums' registers keep their roles (G even): group g's in t_a, g + 1's in t_b
        for g in range(0, G - 2, 2):
            acc, t_b, f = _ws_step(acc, t_a, t_b, f, c, g, G, ring, rows_in, h, INT8, GROUP_AS, COL, STAGES, ZFOLD,
                                   True)
            acc, t_a, f = _ws_step(acc, t_b, t_a, f, c, g + 1, G, ring, rows_in, h, INT8, GROUP_AS, COL, STAGES, ZFOLD,
                                   True)
        acc, t_b, f = _ws_step(acc, t_a, t_b, f, c, G - 2, G, ring, rows_in, h, INT8, GROUP_AS, COL, STAGES, ZFOLD,
                               True)
        acc, t_a, f = _ws_step(acc, t_b, t_a, f, c, G - 1, G, ring, rows_in, h, INT8, GROUP_AS, COL, STAGES, ZFOLD,
                               False)
        c += G
        _store(acc, rows_in, offs_m, off_n, N, out_ptr, stride_om, GROUP_AS, COL)


@gluon.jit
def _ws_partition(ring, descs, ptrs, dims, ROLE: gl.constexpr, INT8: gl.constexpr, GROUP_AS: gl.constexpr,
                  BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr, BK: gl.constexpr, ZFOLD: gl.constexpr,
                  STAGES: gl.constexpr):
    """Role 0 / 1: the MMA warpgroup of the tile's first / second row half; 2: the loader warp (one signature for
    every partition)."""
    if ROLE == 2:
        _ws_load(ring, descs, dims, BM, BN, GROUP_M, BK, _factor_rows(INT8, ZFOLD), STAGES)
    else:
        _ws_mma(ring, ptrs, dims, ROLE, INT8, GROUP_AS, BM, BN, GROUP_M, BK, ZFOLD, STAGES)


@gluon.jit
def _w4a8_wgmma_ws_kernel(
    a_desc, w_desc, sc_desc, as_ptr, rs_ptr, out_ptr, M, N, K, b1, b2, stride_om,
    INT8: gl.constexpr, GROUP_AS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, BK: gl.constexpr, ZFOLD: gl.constexpr, MMA_REGS: gl.constexpr,
):
    """The ``ws`` form of :func:`_w4a8_wgmma_kernel`: persistent (a program per SM walks the tiles in grouped order)
    and warp-specialised — a loader warp keeps the ``STAGES``-deep ring full across tile boundaries, and each of two
    MMA warpgroups (``BM / 2`` rows each, the default partition and a worker) hands a stage back by its own arrival
    on the stage's ``empty`` barrier (count 2): no CTA-wide barrier in the loop, so one warpgroup's fold overlaps the
    other's MMAs, and the next tile's first groups land during this tile's last folds and stores."""
    gl.static_assert(gl.num_warps() == 4, "the default partition is one MMA warpgroup: num_warps = 4")
    gl.static_assert(BM == 128, "two 64-row MMA warpgroups")
    gl.static_assert(STAGES >= 3, "groups g, g + 1 in flight and g + 2 loaded")
    a_s = gl.allocate_shared_memory(a_desc.dtype, [2 * STAGES, BM // 2, BK], a_desc.layout)
    w_s, s_s, sd_s, ready, empty = _weight_ring(w_desc, sc_desc, STAGES, BN, BK, 2)  # empty: both warpgroups arrive
    ring = (a_s, w_s, s_s, sd_s, ready, empty)
    descs = (a_desc, w_desc, sc_desc)
    ptrs = (as_ptr, rs_ptr, out_ptr)
    dims = (M, N, K, b1, b2, stride_om)
    gl.warp_specialize([
        (_ws_partition, (ring, descs, ptrs, dims, 0, INT8, GROUP_AS, BM, BN, GROUP_M, BK, ZFOLD, STAGES)),
        (_ws_partition, (ring, descs, ptrs, dims, 1, INT8, GROUP_AS, BM, BN, GROUP_M, BK, ZFOLD, STAGES)),
        (_ws_partition, (ring, descs, ptrs, dims, 2, INT8, GROUP_AS, BM, BN, GROUP_M, BK, ZFOLD, STAGES)),
    ], [4, 1], [MMA_REGS, 24])


@cache
def unsupported(device, K: int) -> str | None:
    """Why the kernel cannot run here (None: it can): wgmma and TMA are NVIDIA sm_90's, the loop takes groups in
    pairs."""
    device = torch.device(device)
    if triton_interpreted() or device.type != "cuda" or torch.version.cuda is None:
        return f"an NVIDIA CUDA device, not interpreted (got {device.type}{', ROCm' if torch.version.hip else ''})"
    if torch.cuda.get_device_capability(device) != (9, 0):
        return f"compute capability (9, 0) (wgmma; got {torch.cuda.get_device_capability(device)})"
    if K % (2 * GROUP) or K < 2 * GROUP:
        return f"K a multiple of {2 * GROUP} (got {K})"
    return None


def zero_folds(bits: int, int8: bool) -> bool:
    """Whether the weight operand carries the zero point (``q - z``) exactly: as int8 always (``|q - z| <= 31``), as
    e4m3 for int4 (``<= 15``); then the fold has no row-sum term."""
    return int8 or bits == 4


def check_row_offsets(P: int, M: int, K: int) -> None:
    """The kernels index the row inputs (row sums, activation scales) at ``r G + g`` in 32 bits: refuse a call whose
    ``P M G`` reaches 2^31."""
    if P * M * (K // GROUP) >= 2**31:
        raise ValueError(f"w4a8_gemm: the wgmma kernels index the row inputs (row sums, activation scales) in 32 bits: "
                         f"{P} x {M} rows x {K // GROUP} groups reach 2^31; split the call's rows")


def gemm(A: torch.Tensor, AS: torch.Tensor, RS: torch.Tensor, w8: torch.Tensor, sc: torch.Tensor, bounds: list[int],
         out: torch.Tensor, cfg: dict, zfold: bool) -> torch.Tensor:
    """``out[:M]`` = the W4A8 GEMM of ``A [P, M, K]`` (int8, or e4m3 codes as uint8) and the call's 8-bit weight copy
    ``w8 [N, K]`` (int8 / uint8 e4m3; ``zfold``: ``q - z``, else ``q - 2^(b-1)``) with its column factors
    ``sc [2 G, N]`` (both from :func:`.triton.unpack_w8`; the kernel reads ``sc`` flat, one ``[BN]`` TMA tile per row
    and N-block: a partial last block reads the next row's head, columns that are not stored); ``cfg``: BM, BN,
    STAGES, GROUP_M, num_warps (BN at least 32: each stage's ``[BN]`` fp32 scale tile lands 128-byte aligned, as TMA
    needs)."""
    if cfg["BN"] % 32:
        raise ValueError(f"w4a8_gemm: the wgmma kernels need column blocks of at least 32 (partition bounds {bounds} "
                         f"give {cfg['BN']}): each stage's scale tile must land 128-byte aligned for TMA")
    P, M, K = A.shape
    check_row_offsets(P, M, K)
    N = w8.shape[0]
    int8 = A.dtype == torch.int8
    if int8:
        el, gel = torch.int8, gl.int8
    else:
        el, gel = torch.float8_e4m3fn, gl.float8e4nv
    ws = cfg.get("ws", False)
    a_desc = tma_tiles.descriptor(A.view(P * M, K).view(el), [cfg["BM"] // (2 if ws else 1), GROUP], gel)
    w_desc = tma_tiles.descriptor(w8.view(el), [cfg["BN"], GROUP], gel)
    sc_desc = tma_tiles.descriptor(sc.view(-1), [cfg["BN"]], gl.float32, swizzle=False)
    b = list(bounds) + [N] * (4 - len(bounds))
    tiles = -(-M // cfg["BM"]) * -(-N // cfg["BN"])
    args = (a_desc, w_desc, sc_desc, AS, RS, out, M, N, K, b[1], b[2], out.stride(0))
    knobs = dict(INT8=int8, GROUP_AS=AS.dim() == 3, BM=cfg["BM"], BN=cfg["BN"], STAGES=cfg["num_stages"],
                 GROUP_M=cfg["GROUP_M"], BK=GROUP, ZFOLD=zfold, num_warps=cfg["num_warps"])
    if ws:  # a program per SM; 12 warps at launch (the loader's warpgroup), registers moved to the MMA warpgroups
        grid = (min(tiles, torch.cuda.get_device_properties(A.device).multi_processor_count),)
        _w4a8_wgmma_ws_kernel[grid](*args, **knobs, MMA_REGS=WS_MMA_REGS, maxnreg=WS_LAUNCH_REGS)
    else:
        _w4a8_wgmma_kernel[(tiles,)](*args, **knobs)
    return out
