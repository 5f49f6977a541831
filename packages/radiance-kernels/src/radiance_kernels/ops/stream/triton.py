"""The prologue kernel: producer → (channel scale + Givens rotation + 8-bit quant), one launch.

One program per (partition p, BM-row block, group chunk). ``PRODUCER`` picks what feeds the rotation
(0 none = ``rotate_quant``, 1 add+RMSNorm — Gemma weight when ``GEMMA`` —, 3 silu_mul, 4 sigmoid_gate,
5 per-head gated RMSNorm); ``QUANT=False`` runs the plain producer (no rotation). A row-wide step
(the RMSNorm's sum of squares, the per-token amax) makes the program own all groups of its rows and
loop over them; otherwise each program owns one group. The per-token amax needs the whole rotated row
before any code: with ``SCRATCH`` the first pass parks the rotated fp32 row in a [P, M, K] scratch and the
second pass only encodes it (one rotation per element; launches of at most ``SCRATCH_BYTES`` of scratch
each, over row chunks ``row0..``), without it the second pass recomputes the
producer and the rotation (no scratch memory, twice the arithmetic).

Split (small M, :data:`SPLIT_PROGRAMS`): add+RMSNorm (``FOLD``) takes the sum of squares off the walk: a
first launch writes each (row, group)'s ``tree(s*s)`` to an fp32 [M, G] buffer in parallel, the main launch
folds a row's G partials in group order (the reference's ``ss + tree`` order, so bit-identical) and,
per-group or plain, owns one group per program. Per-token with a scratch (``TSPLIT``) runs its two passes as
two launches of one group per program: pass 1 also parks each (row, group)'s amax in an fp32 [P, M, G]
buffer, pass 2 folds them with the walk's maximum in group order. Producer outputs (hs, residual) are
stored by the p = 0 programs only. The math follows :mod:`radiance_kernels.ops.stream.reference` operation
for operation.

Where :func:`radiance_kernels.backends.programmatic_launch_on` holds, every launch here is a programmatic
dependent (``WAIT``): scheduled as soon as the launch before it lets it (the decode GEMM does after its group loop,
the split add+RMSNorm's partials launch as it starts), its programs wait for that grid before reading or writing
anything; the launch's latency hides behind its predecessor's tail. Not the other way round: a GEMM scheduled early
behind its producer lost (H200 call 73, :mod:`radiance_kernels.ops.w4a8_gemm.mma2`).
"""

from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl
from torch.utils.weak import WeakIdKeyDictionary

from radiance_kernels.backends import programmatic_launch_on
from radiance_kernels.formats.rotation import GROUP, givens_tables
from radiance_kernels.ops.rotate_quant import reference as rq_ref
from radiance_kernels.ops.rotate_quant.triton import (
    group_tables,
    load_f32,
    output_buffers,
    prefetch_tables,
    quant_store,
    rotate_group,
    rotate_loaded,
    round_to,
    store_dt,
)
from radiance_kernels.ops.stream import reference as ref
from radiance_kernels.tl.pdl import prefetch_l2, programmatic_start

PRODUCERS = {"none": 0, "add_rms": 1, "add_rms_gemma": 1, "silu_mul": 3, "sigmoid_gate": 4, "gated_rms_norm": 5}
_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
#: Named launch configurations: rows per program (BM), warps, and whether per-token mode parks the rotated
#: row in a fp32 scratch (``scratch``) or recomputes it. BM / num_warps rows per warp: 4 (the tables'
#: per-layer layout conversions go through shared memory with barriers, amortised over 4 rows), 2, or 1
#: (no conversion, no barrier, full occupancy, but the gather's index decode is paid per row). Every config
#: is byte-identical to the reference. BM must be a multiple of num_warps (the tables are loaded once per warp).
#: ``early``: where a program owns one group (the split decode producers, per-group or plain), it reads that group's
#: constants — the producer's weight, the channel scales and every Givens layer's tables, 8 x 3 rows of 128 — before
#: its programmatic wait, while the GEMM before it runs: into registers (1, ``bm1w1e``: ptxas sm_90 160-255
#: registers against 66-72, fewer programs resident) or as L2 prefetches (2, ``bm1w1p``: NVIDIA PTX, taken only where
#: programmatic launch runs); otherwise each layer's tables load as the layer comes, after the wait. In the served
#: stack those tables (4.2-4.7 MB a layer) are not in the L2 (13 GB of weights stream through it per step): their first
#: touch is a DRAM round trip on each producer's critical path. H100 calls 188-189 (the chained int4 stack, A/B twice,
#: bm1w1 -> bm1w1e / bm1w1p): M = 1 -4.5 to -4.9 % / -3.9 to -4.2 %, M = 8 -3.8 to -4.7 % / -1.2 to -2.4 %, M = 16
#: -1.1 to -2.2 % / +0.6 to +2.1 %, e4m3 and int8 per-group alike. Alone, its tables in the L2, bm1w1e wins the
#: add+RMSNorm at M <= 8 (-12 to -26 %) and loses silu-mul (+4 to +47 %, the most at M = 16, P = 3: a second wave).
CONFIGS = {
    "bm16w4": dict(BM=16, num_warps=4, scratch=True),
    "bm16w4_recompute": dict(BM=16, num_warps=4, scratch=False),
    "bm32w8": dict(BM=32, num_warps=8, scratch=True),
    "bm16w8": dict(BM=16, num_warps=8, scratch=True),
    "bm8w4": dict(BM=8, num_warps=4, scratch=True),
    "bm16w16": dict(BM=16, num_warps=16, scratch=True),
    "bm8w8": dict(BM=8, num_warps=8, scratch=True),
    "bm4w4": dict(BM=4, num_warps=4, scratch=True),
    "bm1w1": dict(BM=1, num_warps=1, scratch=True),
    "bm1w1e": dict(BM=1, num_warps=1, scratch=True, early=1),
    "bm1w1p": dict(BM=1, num_warps=1, scratch=True, early=2),
}
DEFAULT = "bm16w4"
#: The default at M <= SMALL_M (decode): one row per warp, so the tables need no per-layer conversion through
#: shared memory and its barriers, which at a few rows are the latency of the launch. H200 call 25 (rotate_quant,
#: K = 5120, P = 1..3, us, bm16w4 -> bm4w4): M = 1 e4m3 group 7.1-7.3 -> 4.1-4.2, per token 13.2-13.5 -> 7.4-7.8,
#: int8 6.8-6.9 -> 4.1-4.2; M = 8 6.3-6.5 -> 3.7-4.1. At M = 64 it wins P = 1 only; at 8192 it is 1.2-1.8x slower.
#: One-warp programs of one row each (bm1w1) go further: H200 call 69 (per call in a CUDA graph, P = 1, per-group,
#: bm4w4 -> bm1w1, us): M = 8, K = 5120 3.72 -> 3.01, K = 17408 4.29 -> 3.53; M = 1 4.03 -> 2.82 (a copy kernel of the
#: same rows: 1.2; the same launch with 1 Givens layer instead of 8: 2.3); bm2w2 ~ bm4w4, bm8w8 1.3-1.6 us slower.
#: bm1w1e (constants read before the wait, above) the same, faster in the stack at every decode M (H100 calls 188-189).
SMALL_M, SMALL_M_DEFAULT = 16, "bm1w1e"


def default_config(M: int) -> str:
    """The launch config a caller that names none gets for M rows."""
    return SMALL_M_DEFAULT if M <= SMALL_M else DEFAULT
#: The row-wide kinds (add+RMSNorm, per-token with a scratch) split their groups over the grid
#: (``split``) while the row-wide grid, P x cdiv(M, BM) programs, is below this: ~4 resident 4-warp
#: programs on each of the H200's 132 SMs, from where other programs hide the row-wide walk's per-group
#: latency (~0.35 us a step) and the split's extra launch (the [M, G] partials / the second per-token pass)
#: stops paying. With bm16w4: M <= 8176 at P = 1, M <= 2720 at P = 3. Static estimate, not yet swept on the device.
SPLIT_PROGRAMS = 512
#: Scratch cap of one per-token launch (larger M runs as several launches over row chunks).
SCRATCH_BYTES = 256 << 20

_LOG2E: tl.constexpr = tl.constexpr(ref.LOG2E)
_LN2_HI: tl.constexpr = tl.constexpr(ref.LN2_HI)
_LN2_LO: tl.constexpr = tl.constexpr(ref.LN2_LO)
_RINT: tl.constexpr = tl.constexpr(ref.RINT_MAGIC)
_EXP_LO: tl.constexpr = tl.constexpr(ref.EXP_LO)
_EXP_HI: tl.constexpr = tl.constexpr(ref.EXP_HI)
_C2: tl.constexpr = tl.constexpr(ref.EXP_POLY[2])
_C3: tl.constexpr = tl.constexpr(ref.EXP_POLY[3])
_C4: tl.constexpr = tl.constexpr(ref.EXP_POLY[4])
_C5: tl.constexpr = tl.constexpr(ref.EXP_POLY[5])
_C6: tl.constexpr = tl.constexpr(ref.EXP_POLY[6])
_C7: tl.constexpr = tl.constexpr(ref.EXP_POLY[7])


@triton.jit
def _exp(x):
    x = tl.minimum(tl.maximum(x, _EXP_LO), _EXP_HI)
    n = (x * _LOG2E + _RINT) - _RINT
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = tl.full(x.shape, _C7, tl.float32)
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + 1.0
    p = p * r + 1.0
    ni = n.to(tl.int32)
    n1 = ni >> 1
    s1 = ((n1 + 127) << 23).to(tl.float32, bitcast=True)
    s2 = ((ni - n1 + 127) << 23).to(tl.float32, bitcast=True)
    return (p * s1) * s2


@triton.jit
def _silu(v):
    return tl.math.div_rn(v, _exp(-v) + 1.0)


@triton.jit
def _sigmoid(v):
    return tl.math.div_rn(tl.full(v.shape, 1.0, tl.float32), _exp(-v) + 1.0)


@triton.jit
def _pair_sum(v, BM: tl.constexpr, HALF: tl.constexpr):
    """[BM, 2·HALF] → [BM, HALF]: v[:, 2i] + v[:, 2i+1]."""
    a, b = tl.split(tl.reshape(v, (BM, HALF, 2)))
    return a + b


@triton.jit
def _tree(v, BM: tl.constexpr):
    """[BM, 128] → [BM]: adjacent-pair sums, 7 levels (the reference's ``tree``)."""
    v = _pair_sum(v, BM, 64)
    v = _pair_sum(v, BM, 32)
    v = _pair_sum(v, BM, 16)
    v = _pair_sum(v, BM, 8)
    v = _pair_sum(v, BM, 4)
    v = _pair_sum(v, BM, 2)
    v = _pair_sum(v, BM, 1)
    return tl.reshape(v, (BM,))


@triton.jit
def _rms_inv(ss, n, eps):
    d = tl.math.sqrt_rn(tl.math.div_rn(ss, n) + eps)
    return tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), d)


@triton.jit
def _load_act(ptr, offs, mask, DT: tl.constexpr, XS: tl.constexpr, stride_s):
    """An input as fp32: DT values, or (``XS`` > 0) the DT rounding of ``XS`` fp32 split partials ``stride_s``
    elements apart, summed in split order from zero — the split-K GEMM's own reduction and output rounding."""
    if XS == 0:
        v = load_f32(ptr, offs, mask, DT)
    else:
        v = tl.zeros(offs.shape, tl.float32)
        for i in tl.static_range(XS):
            v = v + tl.load(ptr + i * stride_s + offs, mask=mask, other=0.0)
        v = round_to(v, DT)
    return v


@triton.jit
def _group_ss(a_ptr, b_ptr, stride_a, stride_b, rows, rmask, cols, g, DT: tl.constexpr, BM: tl.constexpr,
              XA: tl.constexpr, XB: tl.constexpr, sxa, sxb):
    """add+RMSNorm's group-g term of the row sum of squares, ``tree(s*s)`` with s = DT-rounded a + b: [BM]."""
    r64 = rows.to(tl.int64)[:, None]
    xa = _load_act(a_ptr, r64 * stride_a + g * 128 + cols[None, :], rmask[:, None], DT, XA, sxa)
    xb = _load_act(b_ptr, r64 * stride_b + g * 128 + cols[None, :], rmask[:, None], DT, XB, sxb)
    s = round_to(xa + xb, DT)
    return _tree(s * s, BM)


@triton.jit
def _ss_partials_kernel(a_ptr, b_ptr, stride_a, stride_b, sxa, sxb, part_ptr, M, G, DT: tl.constexpr,
                        BM: tl.constexpr, XA: tl.constexpr, XB: tl.constexpr, WAIT: tl.constexpr,
                        TRIGGER: tl.constexpr):
    """Split add+RMSNorm, first launch: part[m, g] = the group-g term of row m (fp32 [M, G]); one program
    per (BM-row block, group). TRIGGER: the main launch may start at once (it waits for this grid)."""
    programmatic_start(WAIT, TRIGGER)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < M
    g = tl.program_id(1)
    t = _group_ss(a_ptr, b_ptr, stride_a, stride_b, rows, rmask, tl.arange(0, 128), g, DT, BM, XA, XB, sxa, sxb)
    tl.store(part_ptr + rows.to(tl.int64) * G + g, t, mask=rmask)


@triton.jit
def _weight_offsets(w_gstride, cols, g, PRODUCER: tl.constexpr):
    """Where the producer's weight on group g lies: add+RMSNorm's per channel, the gated RMSNorm's per head
    (``w_gstride`` 0: one head's row for every group)."""
    return g * (128 if PRODUCER == 1 else w_gstride) + cols


@triton.jit
def _weight(w_ptr, w_gstride, cols, g, PRODUCER: tl.constexpr, DT: tl.constexpr):
    """The producer's weight on group g as fp32 [1, 128] (:func:`_weight_offsets`); none (zeros, nothing read) for
    the producers without one."""
    if PRODUCER == 1 or PRODUCER == 5:
        w = load_f32(w_ptr, _weight_offsets(w_gstride, cols, g, PRODUCER), cols < 128, DT)[None, :]
    else:
        w = tl.zeros((1, 128), tl.float32)
    return w


@triton.jit
def _produce(a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr, store_mask,
             rows, rmask, cols, g, K, inv,
             PRODUCER: tl.constexpr, GEMMA: tl.constexpr, DT: tl.constexpr, STORE: tl.constexpr,
             BM: tl.constexpr, XA: tl.constexpr, XB: tl.constexpr, w_loaded=None):
    """The producer's output for group g of the tile's rows, as DT-rounded fp32 [BM, 128]; its weight there
    (:func:`_weight`) loaded where it is used, or ``w_loaded``."""
    r64 = rows.to(tl.int64)[:, None]
    m2 = rmask[:, None]
    xa = _load_act(a_ptr, r64 * stride_a + g * 128 + cols[None, :], m2, DT, XA, sxa)
    if PRODUCER == 0:
        v = xa
    else:
        xb = _load_act(b_ptr, r64 * stride_b + g * 128 + cols[None, :], m2, DT, XB, sxb)
        if PRODUCER == 1:
            s = round_to(xa + xb, DT)
            n = s * inv[:, None]
            w = _weight(w_ptr, w_gstride, cols, g, PRODUCER, DT) if w_loaded is None else w_loaded
            if GEMMA:
                v = round_to(n * (w + 1.0), DT)
            else:
                v = round_to(round_to(n, DT) * w, DT)
            if STORE:
                store_dt(res_ptr, r64 * K + g * 128 + cols[None, :], s, store_mask[:, None], DT)
        elif PRODUCER == 3:
            v = round_to(round_to(_silu(xb), DT) * xa, DT)
        elif PRODUCER == 4:
            v = round_to(xa * round_to(_sigmoid(xb), DT), DT)
        else:
            h_inv = _rms_inv(_tree(xa * xa, BM), 128.0, eps)
            w = _weight(w_ptr, w_gstride, cols, g, PRODUCER, DT) if w_loaded is None else w_loaded
            v = round_to(((xa * h_inv[:, None]) * w) * _silu(xb), DT)
    if STORE:
        store_dt(hs_ptr, r64 * K + g * 128 + cols[None, :], v, store_mask[:, None], DT)
    return v


@triton.jit
def _prologue_kernel(
    a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr,
    mate_ptr, cos_ptr, sin_ptr, cs_ptr, q_ptr, as_ptr, rs_ptr, scr_ptr, part_ptr, amax_ptr, inv_qmax,
    M, K, G, GPP, row0, scr_rows,
    PRODUCER: tl.constexpr, GEMMA: tl.constexpr, DT: tl.constexpr, QUANT: tl.constexpr, ELEM: tl.constexpr,
    TOKEN: tl.constexpr, STORE_HS: tl.constexpr, NL: tl.constexpr, HW: tl.constexpr, BM: tl.constexpr,
    SCRATCH: tl.constexpr, NW: tl.constexpr, FOLD: tl.constexpr, TSPLIT: tl.constexpr, WAIT: tl.constexpr,
    XA: tl.constexpr = 0, XB: tl.constexpr = 0, EARLY: tl.constexpr = 0,
):
    p = tl.program_id(0)
    cols = tl.arange(0, 128)
    g0 = tl.program_id(2) * GPP
    # one group per program (GPP = 1, per-group or plain): its weight and Givens tables are constants, read while
    # the launch before this one runs — into registers (EARLY 1) or, prefetched, into the L2 (EARLY 2)
    if EARLY == 1:
        w0 = _weight(w_ptr, w_gstride, cols, g0, PRODUCER, DT)
        if QUANT:
            tables = group_tables(mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g0, K, cols, NL, BM, NW)
    elif EARLY == 2:
        if PRODUCER == 1 or PRODUCER == 5:
            prefetch_l2(w_ptr + _weight_offsets(w_gstride, cols, g0, PRODUCER))
        if QUANT:
            prefetch_tables(mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g0, K, cols, NL)
    programmatic_start(WAIT)
    rows = row0 + tl.program_id(1) * BM + tl.arange(0, BM)
    rmask = rows < M
    store_mask = rmask & (p == 0)
    g1 = tl.minimum(g0 + GPP, G)
    inv = tl.zeros((BM,), tl.float32)
    if PRODUCER == 1 and TSPLIT != 2:
        ss = tl.zeros((BM,), tl.float32)
        if FOLD:
            # the [M, G] partials of _ss_partials_kernel, folded in group order as the walk below adds
            # them (unrolled: the FOLD loads issue back to back, only the adds are serial)
            # (8 loads in flight at a time: every thread holds the BM rows, all FOLD at once would spill)
            for c in range(0, FOLD, 8):
                for j in tl.static_range(8):
                    ss = ss + tl.load(part_ptr + rows.to(tl.int64) * G + c + j, mask=rmask & (c + j < FOLD),
                                      other=0.0)
        else:
            for g in range(0, G):
                ss = ss + _group_ss(a_ptr, b_ptr, stride_a, stride_b, rows, rmask, cols, g, DT, BM, XA, XB, sxa,
                                    sxb)
        inv = _rms_inv(ss, K.to(tl.float32), eps)
    if TOKEN and SCRATCH:
        # pass 1: produce, rotate, row amax, park the rotated tile; pass 2: encode the parked row
        # (TSPLIT 1 / 2: the two passes as two launches, one group per program; pass 1 parks its group's
        # amax in amax_ptr [P, M, G], pass 2 folds them in group order with the same maximum)
        amax = tl.zeros((BM,), tl.float32)
        sofs = (p * scr_rows + rows - row0).to(tl.int64)[:, None] * K + cols[None, :]
        abase = (p * M + rows).to(tl.int64) * G
        if TSPLIT != 2:
            for g in range(g0, g1):
                v = _produce(a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr,
                             store_mask, rows, rmask, cols, g, K, inv, PRODUCER, GEMMA, DT, STORE_HS, BM, XA, XB)
                v = rotate_group(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL, BM, NW)
                amax = tl.maximum(amax, tl.max(tl.abs(v), axis=1))
                tl.store(scr_ptr + sofs + g * 128, v, mask=rmask[:, None])
            if TSPLIT == 1:
                tl.store(amax_ptr + abase + g0, amax, mask=rmask)
            else:
                tl.debug_barrier()  # the parked tiles are read back by whichever thread the layout gives them to
        if TSPLIT != 1:
            if TSPLIT == 2:  # max(amax, 0) past G is exact: amax >= 0 or NaN
                for c in range(0, G, 8):
                    for j in tl.static_range(8):
                        amax = tl.maximum(amax, tl.load(amax_ptr + abase + c + j, mask=rmask & (c + j < G),
                                                        other=0.0))
            scale = amax * inv_qmax
            tl.store(as_ptr + p * M + rows, scale, mask=rmask & (g0 == 0))
            for g in range(g0, g1):
                v = tl.load(scr_ptr + sofs + g * 128, mask=rmask[:, None], other=0.0)
                quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols, ELEM, HW)
    elif TOKEN:
        # iterations 0..G-1 find the row amax, G..2G-1 encode (one loop body: half the code to compile)
        amax = tl.zeros((BM,), tl.float32)
        for it in range(0, 2 * G):
            g = it % G
            v = _produce(a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr,
                         store_mask & (it >= G), rows, rmask, cols, g, K, inv, PRODUCER, GEMMA, DT, STORE_HS, BM,
                         XA, XB)
            v = rotate_group(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL, BM, NW)
            if it < G:
                amax = tl.maximum(amax, tl.max(tl.abs(v), axis=1))
            else:
                scale = amax * inv_qmax
                tl.store(as_ptr + p * M + rows, scale, mask=rmask & (it == G))
                quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols, ELEM, HW)
    else:
        for g in range(g0, g1):
            if EARLY == 1:  # the one group's constants, loaded before the wait
                v = _produce(a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr,
                             store_mask, rows, rmask, cols, g, K, inv, PRODUCER, GEMMA, DT, STORE_HS, BM, XA, XB, w0)
            else:
                v = _produce(a_ptr, b_ptr, w_ptr, stride_a, stride_b, sxa, sxb, w_gstride, eps, hs_ptr, res_ptr,
                             store_mask, rows, rmask, cols, g, K, inv, PRODUCER, GEMMA, DT, STORE_HS, BM, XA, XB)
            if QUANT:
                if EARLY == 1:
                    v = rotate_loaded(v, tables, NL)
                else:
                    v = rotate_group(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL, BM, NW)
                scale = tl.max(tl.abs(v), axis=1) * inv_qmax
                tl.store(as_ptr + (p * M + rows).to(tl.int64) * G + g, scale, mask=rmask)
                quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols, ELEM, HW)


_TABLES: WeakIdKeyDictionary = WeakIdKeyDictionary()


def givens_tables_cached(pairs: torch.Tensor, theta: torch.Tensor):
    """:func:`givens_tables` (partner, cos, sin), memoised per ``pairs`` tensor object while neither
    ``pairs`` nor ``theta`` is replaced or modified in place (their ``_version``), so serving with static
    records (and CUDA-graph replays) launches no table kernels after the first call."""
    key = (theta._version, pairs._version)
    hit = _TABLES.get(pairs)
    if hit is not None and hit[0]() is theta and hit[1] == key:
        return hit[2]
    tables = givens_tables(pairs, theta)
    _TABLES[pairs] = (weakref.ref(theta), key, tables)
    return tables


def _bits(t: torch.Tensor) -> torch.Tensor:
    """bf16 tensors travel as int16 views (raw bits)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def launch(producer: str, a: torch.Tensor, b: torch.Tensor | None = None, weight: torch.Tensor | None = None,
           eps: float = 0.0, rotation=None, elem: str | None = None, granularity: str | None = None,
           store_hs: bool = False, hw: bool = False, out: dict[str, torch.Tensor] | None = None,
           cfg: str | None = None, split: bool | None = None) -> dict[str, torch.Tensor]:
    """Run the prologue kernel; returns the outputs by name: ``hs`` (and ``residual`` for the norms) when ``store_hs``,
    ``A``/``AS``/``RS`` when ``rotation`` = (pairs [P,krot,K], theta, channel_scales) is given. ``out`` may hold
    preallocated buffers by the same names (tests poison them). Argument checks are the callers' (the op wrappers);
    ``cfg`` names an entry of :data:`CONFIGS` (None: :func:`default_config`). ``split`` (add+RMSNorm, or per-token with
    a scratch config): fold the sum of squares / the row amax from per-group partials written in parallel instead of
    walking the row (None: split while the row-wide grid has fewer than :data:`SPLIT_PROGRAMS` programs); asked of any
    other launch it raises. ``a`` / ``b`` may each be fp32 split partials ``[S, M, K]`` (:func:`ref.activation`): the
    kernel sums them as it loads them, and the activation dtype is bf16."""
    cfg = default_config(a.shape[-2]) if cfg is None else cfg
    if cfg not in CONFIGS:
        raise ValueError(f"prologue cfg {cfg!r} is not one of {sorted(CONFIGS)}")
    bm, num_warps, scratch = CONFIGS[cfg]["BM"], CONFIGS[cfg]["num_warps"], CONFIGS[cfg]["scratch"]
    if bm % num_warps or bm & (bm - 1):
        raise ValueError(f"prologue cfg {cfg!r}: BM={bm} must be a power of two and a multiple of num_warps")
    M, K = a.shape[-2:]
    dt = ref.act_dtype(a)
    G = K // GROUP
    kind = PRODUCERS[producer]
    dev = a.device
    wanted = {}
    quant = rotation is not None
    token = quant and granularity == "token"
    scratch = scratch and token
    if split is not None and kind != 1 and not scratch:
        raise ValueError(f"prologue split={split!r} applies to add_rms producers and per-token scratch configs, "
                         f"not {producer!r} {granularity or 'plain'} with cfg {cfg!r}")
    if store_hs:
        wanted["hs"] = ((M, K), dt)
        if kind == 1:
            wanted["residual"] = ((M, K), dt)
    if quant:
        pairs, theta, channel_scales = rotation
        P, NL = pairs.shape[0], pairs.shape[1]
        mate, cos, sin = givens_tables_cached(pairs, theta)
        cs = channel_scales.contiguous()
        a_shape, as_shape, rs_shape = rq_ref.output_shapes(P, M, K, granularity)
        wanted |= {"A": (a_shape, rq_ref.code_dtype(elem)), "AS": (as_shape, torch.float32),
                   "RS": (rs_shape, torch.float32)}
        inv_qmax = rq_ref.INV_QMAX[elem]
    else:
        P, NL, inv_qmax = 1, 0, 0.0
        mate = cos = sin = cs = torch.empty(1, dtype=torch.float32, device=dev)  # never read
    out = output_buffers(out, wanted, dev)
    dummy = torch.empty(1, dtype=torch.int16 if dt == torch.bfloat16 else dt, device=dev)  # never read
    xa, xb = (0 if t is None or t.dim() == 2 else t.shape[0] for t in (a, b))  # split partials
    sxa, sxb = (t.stride(0) if n else 0 for t, n in ((a, xa), (b, xb)))
    if M == 0:
        return out
    pdl = programmatic_launch_on(dev)
    if split is None:
        split = (kind == 1 or scratch) and P * triton.cdiv(M, bm) < SPLIT_PROGRAMS
    fold = split and kind == 1
    tsplit = split and scratch
    GPP = G if (token and not tsplit) or (kind == 1 and not split) else 1
    early = CONFIGS[cfg].get("early", 0) if GPP == 1 and not token else 0
    early = 0 if early == 2 and not pdl else early  # prefetching for a wait there is none of: no PTX here
    part = cos  # never read
    if fold:
        part = torch.empty((M, G), dtype=torch.float32, device=dev)
        _ss_partials_kernel[(triton.cdiv(M, bm), G)](
            _bits(a), _bits(b), a.stride(-2), b.stride(-2), sxa, sxb, part, M, G, DT=_DT[dt], BM=bm, XA=xa, XB=xb,
            WAIT=pdl, TRIGGER=pdl, num_warps=num_warps, enable_fp_fusion=False, launch_pdl=pdl)
    chunk = M
    if scratch:  # equal chunks of whole row blocks, each within the cap
        cap = max(bm, SCRATCH_BYTES // (P * K * 4) // bm * bm)
        chunk = triton.cdiv(triton.cdiv(M, triton.cdiv(M, cap)), bm) * bm
    scr = torch.empty((P, min(chunk, M), K), dtype=torch.float32, device=dev) if scratch else cos  # cos: never read
    amax = torch.empty((P, M, G), dtype=torch.float32, device=dev) if tsplit else cos  # cos: never read
    for row0, phase in ((r, t) for r in range(0, M, chunk) for t in ((1, 2) if tsplit else (0,))):
        grid = (P, triton.cdiv(min(chunk, M - row0), bm), triton.cdiv(G, GPP))
        _prologue_kernel[grid](
            _bits(a), _bits(b) if b is not None else dummy, _bits(weight) if weight is not None else dummy,
            a.stride(-2), b.stride(-2) if b is not None else 0, sxa, sxb,
            0 if weight is not None and weight.numel() == GROUP else GROUP, float(eps),
            _bits(out["hs"]) if store_hs else dummy, _bits(out["residual"]) if "residual" in out else dummy,
            mate, cos, sin, cs,
            out["A"] if quant else dummy, out["AS"] if quant else cos, out["RS"] if quant else cos, scr, part, amax,
            inv_qmax,
            M, K, G, GPP, row0, scr.shape[1] if scratch else 0,
            PRODUCER=kind, GEMMA=producer == "add_rms_gemma", DT=_DT[dt], QUANT=quant,
            ELEM=int(elem == "int8"), TOKEN=token, STORE_HS=store_hs, NL=NL, HW=hw, BM=bm, SCRATCH=scratch,
            NW=num_warps, FOLD=G if fold else 0, TSPLIT=phase, WAIT=pdl, XA=xa, XB=xb, EARLY=early, num_warps=num_warps,
            enable_fp_fusion=False, launch_pdl=pdl,
        )
    return out
