"""W4A8 / W5A8 group GEMM kernel (layout and math: :mod:`.reference`).

One kernel, parametrised by constexprs: weight bits (4/5), activation element (e4m3 codes → fp8 x fp8
``tl.dot``; int8 → int8 x int8 ``tl.dot`` with int32 accumulation), activation-scale granularity
(token / group) and the zero-point form:
- in-loop (row-sum correction): per group ``acc += as * (s * t - (s*d) * RS)``, ``t = a · c``;
- ZPE (epilogue): per group ``acc += as * s * t``; after the loop ``acc -= (as*RS) @ (s*d)`` as a
  rank-G fp32 product over the program's groups (3xTF32 tensor-core dot on NVIDIA, ~fp32 accurate
  and far fewer registers than the FMA dot; "ieee" elsewhere).
Each N-block takes its activation partition from the bounds (``n0 >= b1``, ``n0 >= b2``).

Bands (dispatch by M in :func:`gemm`; tiles by name in :data:`DECODE` / :data:`PREFILL`, any key
overridable per call): decode (M <= DECODE_MAX_M, BM 16..64) splits the groups over a second grid
axis; the fp32 partials ``[S, M, N]`` are summed in split order by the tile's last-arriving program
(deterministic; the first version summed them in two host launches). Prefill tiles 128x128 (8 warps)
over M, N in grouped launch order. The loop runs over 128-groups (the scale group, one fold each).
Weight codes into the dot, e4m3 activations: fp8 dot on the KS-wide unpacked tile (``c - 2^(b-1)``
to e4m3 by one fp16 → fp8 convert on GPUs, the integer encoder under the interpreter), or with
``dot16`` an fp16 dot (:func:`dot16`), with ``nib8`` per nibble index (no reshape of the packed
words, which then load straight into the mma operand layout). ``swap`` (swap-AB) runs the nib8 loop
transposed, ``outT [BN, BM] = (q - off) · aT``: the register-unpacked weights are the MMA's M side
(sm_90: wgmma, A from registers, N = the 16-token tile), the acc is transposed back before the epilogue.
int8 activations: int8 x int8 dot on the KS-wide tile, or the same dot16 / nib8 loops with the int8
values as fp16 (exact, as are the K=16 sums in fp32). ``ablate``
(bench only) removes the MMA or the DRAM weight stream from the nib8 loop (:data:`DECODE`). int8
activations at small M run a separate CUDA-core kernel (:mod:`.gemv`, the "gemv" configs: the default to
GEMV_MAX_M, per shape and width by the tuned table).
``predeq`` (prefill, :data:`PREFILL`): the KS loop reads a per-call 8-bit copy of the weights
(:func:`unpack_w8`) instead of unpacking the packed words between the MMAs. ``blockwise`` (prefill, int4 x e4m3,
sm_90): that copy with the zero folded in goes to the library's block-scaled fp8 GEMM (:mod:`.blockwise`), the
default there; the Triton loop is its portable twin.
Registers / spills per config: ``tools/device/sm90_report.py`` (ptxas for sm_90, no GPU needed).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance_kernels.backends import programmatic_launch_on, triton_interpreted
from radiance_kernels.ops.arrivals import counters
from radiance_kernels.ops.w4a8_gemm import blockwise, tuned
from radiance_kernels.ops.w4a8_gemm.reference import DECODE_MAX_M, GROUP, W4Prepared, check_inputs, check_out
from radiance_kernels.tl.bf16 import to_bf16
from radiance_kernels.tl.e4m3 import e4m3_encode_sw

RW_WIDTHS = (1, 2, 4, 8, 16)  # split partials per reduction step (rw)
REDUCE_VALUES = 80  # fp32 per thread the mma2 reduction holds per step (ptxas sm_90: wg at BM = 64 stays at 128 regs)
# Runtime ints that vary per call/layer: one compiled kernel for all of them (no 1 / %16 variants).
NO_SPECIALIZE = ["M", "b1", "b2", "groups_per_split"]
_SMS = 132  # H200


@triton.constexpr_function
def reduce_rows(BM: int, BN: int, RW: int, NW: int) -> int:
    """The mma2 split reduction's chunk: rows of the ``[BM, BN]`` tile read per step, the ``RW`` partials of
    ``[rows, BN]`` in flight and their sum holding at most ``REDUCE_VALUES`` fp32 per thread of ``NW`` warps (a power
    of two, at least the ``128 NW / BN`` rows its 16-byte column vectors cover, at most the tile)."""
    rows = REDUCE_VALUES * 32 * NW // ((RW + 1) * BN)
    return max(min(BM, 128 * NW // BN), min(BM, 1 << max(0, rows.bit_length() - 1)))


def reduce_steps(BM: int, BN: int, RW: int, NW: int, splits: int) -> int:
    """L2 round trips of the mma2 split reduction: chunks of the tile x steps of ``RW`` partials."""
    return triton.cdiv(BM, reduce_rows(BM, BN, RW, NW)) * triton.cdiv(splits, RW)


@triton.jit
def tile_coords(M, N, b1, b2, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped launch order → (pid_m, pid_n, partition of the N-block: count of bounds b1, b2 <= n0)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    n0 = pid_n * BN
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    return pid_m, pid_n, part


@triton.jit
def tile_setup(M, N, K, b1, b2, groups_per_split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP_M: tl.constexpr):
    """The program's tile: (partition, row / column offsets and masks, its split's group range [g_lo, g_hi))."""
    pid_m, pid_n, part = tile_coords(M, N, b1, b2, BM, BN, GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    g_lo = tl.program_id(1) * groups_per_split
    g_hi = tl.minimum(g_lo + groups_per_split, K // BK)
    return part, offs_m, offs_n, offs_m < M, offs_n < N, g_lo, g_hi


@triton.jit
def scale_rows(as_ptr, rs_ptr, part, M, G, rows, GROUP_AS: tl.constexpr):
    """Pointers to the tile rows' activation scales (``AS [P, M]`` or ``[P, M, G]``) and row sums
    (``RS [P, M, G]``) of the program's partition: (as_rows, rs_rows)."""
    if GROUP_AS:
        as_rows = as_ptr + part * M * G + rows * G
    else:
        as_rows = as_ptr + part * M + rows
    return as_rows, rs_ptr + part * M * G + rows * G


@triton.jit
def sz_scale(sz):
    """The fp16 group scale ``s`` (bits 0..15 of an ``sz`` word) as fp32."""
    return (sz & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def load_nibbles(w_ptr, k0, offs_n, mask_n, N, BK: tl.constexpr, BN: tl.constexpr):
    """[BK, BN] int32 codes from K-packed words ``w [K/8, N]`` (nibble j of row i = k 8i + j), k0 % 8 == 0."""
    rows = k0 // 8 + tl.arange(0, BK // 8)
    words = tl.load(w_ptr + rows[:, None] * N + offs_n[None, :], mask=mask_n[None, :], other=0)
    return tl.reshape((words[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 15, (BK, BN))


@triton.jit
def load_codes(wq_ptr, wh_ptr, k0, offs_n, mask_n, N, BITS: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr):
    """[BK, BN] int32 codes ``q`` of rows k0.. (k0 % 8 == 0): the nibbles of ``wq``; int5 adds bit 4 from
    ``wh [K/8, N]`` bytes (bit j of row i = k 8i + j)."""
    q = load_nibbles(wq_ptr, k0, offs_n, mask_n, N, BK, BN)
    if BITS == 5:
        wh = tl.load(wh_ptr + (k0 // 8 + tl.arange(0, BK // 8))[:, None] * N + offs_n[None, :], mask=mask_n[None, :],
                     other=0).to(tl.int32)
        q = q | (tl.reshape((wh[:, None, :] >> tl.arange(0, 8)[None, :, None]) & 1, (BK, BN)) << 4)
    return q


@triton.jit
def w8_operand(c, INT8: tl.constexpr, HW: tl.constexpr):
    """Signed codes ``c`` (|c| <= 16) as the dot's 8-bit weight operand, exactly: int8, or e4m3 — one packed
    fp16 → fp8 convert on GPUs, the integer encoder under the interpreter (whose fp8 cast is wrong)."""
    if INT8:
        w = c.to(tl.int8)
    elif HW:
        w = c.to(tl.float16).to(tl.float8e4nv)
    else:
        w = e4m3_encode_sw(c.to(tl.float32)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return w


@triton.jit
def _unpack_w8_kernel(wq_ptr, wh_ptr, sz_ptr, w8_ptr, sc_ptr, N, K, b1, b2, BITS: tl.constexpr, INT8: tl.constexpr,
                      HW: tl.constexpr, ZFOLD: tl.constexpr, SCALES: tl.constexpr, BLOCKS: tl.constexpr,
                      BK: tl.constexpr, BN: tl.constexpr):
    """``w8 [N, K]`` (K-contiguous) = :func:`w8_operand` of ``c = q - 2^(BITS-1)`` (ZFOLD: ``c - d = q - z``, the
    group's zero folded in), e4m3 as its uint8 bytes; SCALES: also the fold's column factors ``sc [2 G, N]`` fp32 (rows
    2g, 2g + 1: ``s``, ``s d``; int8 with the zero folded in: ``s``, ``-1.5 * 2^23 * s``, exact as ``s`` is fp16);
    BLOCKS: instead ``sc`` flat ``[G N]`` holds ``s`` fp32 as one contiguous ``[G, hi - lo]`` block per partition
    (columns ``lo .. hi`` of bounds ``0, b1, b2, N``; block at ``G lo``): the library GEMM's ``scale_b`` per partition.
    One [BK, BN] tile per program (grid K/BK x N/BN, BK = the group)."""
    g = tl.program_id(0)
    k0 = g * BK
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask_n = offs_n < N
    c = load_codes(wq_ptr, wh_ptr, k0, offs_n, mask_n, N, BITS, BK, BN) - (1 << (BITS - 1))
    if ZFOLD or SCALES or BLOCKS:
        sz = tl.load(sz_ptr + g * N + offs_n, mask=mask_n, other=0)
    if ZFOLD:
        c -= (sz >> 16)[None, :]
    if BLOCKS:
        lo = tl.where(offs_n >= b2, b2, tl.where(offs_n >= b1, b1, 0))
        hi = tl.where(offs_n >= b2, N, tl.where(offs_n >= b1, b2, b1))
        tl.store(sc_ptr + (K // BK) * lo + g * (hi - lo) + offs_n - lo, sz_scale(sz), mask=mask_n)
    if SCALES:
        s = sz_scale(sz)
        tl.store(sc_ptr + 2 * g * N + offs_n, s, mask=mask_n)
        if ZFOLD and INT8:
            second = s * -12582912.0
        else:
            second = s * (sz >> 16).to(tl.float32)
        tl.store(sc_ptr + (2 * g + 1) * N + offs_n, second, mask=mask_n)
    w = w8_operand(c, INT8, HW)
    if not INT8:
        w = w.to(tl.uint8, bitcast=True)
    tl.store(w8_ptr + offs_n.to(tl.int64)[None, :] * K + k0 + tl.arange(0, BK)[:, None], w, mask=mask_n[None, :])


@triton.jit
def along0(v, SWAP: tl.constexpr):
    """``v`` along axis 0 of the tile frame (``v[:, None]``); SWAP (the transposed frame): ``v[None, :]``."""
    if SWAP:
        r = v[None, :]
    else:
        r = v[:, None]
    return r


@triton.jit
def along1(v, SWAP: tl.constexpr):
    """``v`` along axis 1 of the tile frame (``v[None, :]``); SWAP: ``v[:, None]``."""
    if SWAP:
        r = v[:, None]
    else:
        r = v[None, :]
    return r


@triton.jit
def plane(x, J: tl.constexpr):
    """``x[:, :, J]`` of a ``[R, C, 8]`` tile, by three in-register splits (shared between the 8 planes)."""
    R: tl.constexpr = x.shape[0]
    C: tl.constexpr = x.shape[1]
    lo, hi = tl.split(tl.reshape(x, (R, C, 4, 2)))
    if J % 2:
        y = hi
    else:
        y = lo
    lo, hi = tl.split(tl.reshape(y, (R, C, 2, 2)))
    if (J // 2) % 2:
        y = hi
    else:
        y = lo
    lo, hi = tl.split(y)
    if J // 4:
        y = hi
    else:
        y = lo
    return y


@triton.jit
def spread_even(x):
    """Bits 0, 2, 4, 6 of ``x`` to bits 4, 12, 20, 28 (one multiply: copies at shifts 4/10/16/22 collide
    only into unused bits, whose carries stop there)."""
    return ((x & 0x55) * 0x00410410) & 0x10101010


@triton.jit
def dot16(a, c, acc, OFF: tl.constexpr, HW: tl.constexpr, SH: tl.constexpr = 0, SWAP: tl.constexpr = False,
          NODOT: tl.constexpr = False, INT8: tl.constexpr = False):
    """``acc + a · (q - OFF)`` for e4m3 codes ``a`` and weight codes ``c = q << SH`` (``q < 32``, SH 0 or 4)
    with fp16 operands: ``c | 0x6400`` is the fp16 ``1024 + c`` (no int→float convert), minus
    ``1024 + (OFF << SH)`` exactly = ``2^SH (q - OFF)``; ``a`` is taken times ``2^-SH`` (exact in fp16 for
    every e4m3 value), so the products are exact in the fp32 sum (fp32 operands under the interpreter).
    INT8: ``a`` holds int8 values, exact in fp16 (so is ``a 2^-SH``): the K=16 sums are exact in fp32.
    SWAP: ``a`` is ``[K, M]``, ``c`` is ``[N, K]`` and the result ``acc + (q - OFF) · a`` (swap-AB: the
    register-made weight tile is the MMA's M side). NODOT (ablation, wrong result, BM == 16): no MMA, the
    unpacked tile is added into ``acc`` elementwise (the weight loads and the unpack stay live, the
    activations are dead code)."""
    w = (c | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - (1024.0 + (OFF << SH))
    if not INT8:
        a = a.to(tl.float8e4nv, bitcast=True)
    if HW:
        a = a.to(tl.float16)
    else:
        a = a.to(tl.float32)
        w = w.to(tl.float32)
    if SH:
        a = a * (1.0 / (1 << SH))
    if NODOT:
        r = acc + w.to(tl.float32)
    elif SWAP:
        r = tl.dot(w, a, acc)
    else:
        r = tl.dot(a, w, acc)
    return r


@triton.jit
def out_value(x, out_ptr, SOFT: tl.constexpr):
    """fp32 ``x`` as ``out``'s element: fp32 as is (a reduced GEMM handing its sum as one split partial), else bf16."""
    if out_ptr.dtype.element_ty == tl.float32:
        return x
    else:
        return to_bf16(x, SOFT)


@triton.jit
def store_tile(acc, ws_ptr, out_ptr, cnt_ptr, offs_m, offs_n, mask_m, mask_n, M, N, stride_om,
               SPLIT: tl.constexpr, SOFT: tl.constexpr, RW: tl.constexpr = 4):
    """Epilogue. SPLIT 0: ``out`` (bf16, or fp32: :func:`out_value`). 1: fp32 partial ``ws[s]`` (summed by the host
    or the consumer). 2: partial, then the tile's arrival counter ``cnt[pid]``; the last program of the tile sums
    ``ws[0..S-1]`` in split order (deterministic), stores it as ``out``'s element and resets the counter to 0
    (:func:`radiance_kernels.ops.arrivals.counters`), loading RW partials per step: its sum is a chain of L2 round
    trips, one per step (4 is what the compiler's unroll of a plain loop gave; the "r" gemv configs of
    :data:`DECODE` take more)."""
    mask = mask_m[:, None] & mask_n[None, :]
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    if SPLIT == 0:
        tl.store(out, out_value(acc, out_ptr, SOFT), mask=mask)
    else:
        part = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
        S = tl.num_programs(1)
        tl.store(part + tl.program_id(1).to(tl.int64) * M * N, acc, mask=mask)
        if SPLIT == 2:
            tl.debug_barrier()  # every thread's partial is written before the release below
            if tl.atomic_add(cnt_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu") == S - 1:
                total = tl.zeros_like(acc)
                for i0 in range(0, S, RW):  # RW partials in flight per L2 round trip, added in split order
                    for r in tl.static_range(RW):
                        live = i0 + r < S
                        p = tl.load(part + (i0 + r) * M * N, mask=mask & live, other=0.0, cache_modifier=".cg")
                        total = tl.where(live, total + p, total)
                tl.store(out, out_value(total, out_ptr, SOFT), mask=mask)
                tl.store(cnt_ptr + tl.program_id(0), 0)  # every arrival is in: the counter is free for the next launch


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _w4a8_kernel(
    a_ptr, as_ptr, rs_ptr, wq_ptr, wh_ptr, sz_ptr, ws_ptr, out_ptr, cnt_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    BITS: tl.constexpr, INT8: tl.constexpr, GROUP_AS: tl.constexpr, ZPE: tl.constexpr,
    SPLIT: tl.constexpr, RW: tl.constexpr, HW: tl.constexpr, DOT16: tl.constexpr, NIB8: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KS: tl.constexpr, BG: tl.constexpr,
    GROUP_M: tl.constexpr, ZPE_PREC: tl.constexpr, SWAP: tl.constexpr = False, ABLATE: tl.constexpr = 0,
    APRE: tl.constexpr = False, PREDEQ: tl.constexpr = False,
):
    part, offs_m, offs_n, mask_m, mask_n, g_lo, g_hi = tile_setup(M, N, K, b1, b2, groups_per_split, BM, BN, BK,
                                                                   GROUP_M)
    G = K // BK
    offs_k = tl.arange(0, KS)
    if HW and not INT8:  # typed fp8 loads: the tile can feed the dot (and its pipeline) with no cast op
        a_ptr = a_ptr.to(tl.pointer_type(tl.float8e4nv))
        if PREDEQ:
            wq_ptr = wq_ptr.to(tl.pointer_type(tl.float8e4nv))
    NIB: tl.constexpr = NIB8 and DOT16  # int8 activations too: fp16 MMAs on exact integers
    SW: tl.constexpr = SWAP and NIB  # the loop runs in the transposed frame: tiles [BN, BM], weights [BN, K]
    AP: tl.constexpr = APRE and NIB
    a_rows = a_ptr + part.to(tl.int64) * M * K + along0(offs_m.to(tl.int64) * K, SW)
    as_rows, rs_rows = scale_rows(as_ptr, rs_ptr, part, M, G, offs_m, GROUP_AS)
    offs_i = tl.arange(0, BK // 8)
    if PREDEQ:  # the weight operand is the call's w8 [N, K] (K-contiguous): column n starts at n * K
        w8_cols = wq_ptr + offs_n.to(tl.int64)[None, :] * K
    OFF: tl.constexpr = 1 << (BITS - 1)

    TM: tl.constexpr = BN if SW else BM  # the tile frame [TM, TN]
    TN: tl.constexpr = BM if SW else BN
    acc = tl.zeros((TM, TN), dtype=tl.float32)
    if AP:  # the group's activations [BM, 16, 8] (frame order; k = 8i + j: 8-byte rows), one group ahead: the
        # per-plane loads otherwise sit behind the barrier of each dot's operand staging, one L2 trip per dot
        a3_ptrs = (a_rows + along1(8 * offs_i, SW))[:, :, None] + tl.arange(0, 8)[None, None, :]
        a3_mask = along0(mask_m, SW)[:, :, None]
        a3 = tl.load(a3_ptrs + g_lo * BK, mask=a3_mask & (g_lo < g_hi), other=0.0)
    for g in range(g_lo, g_hi):
        if INT8 and not NIB:
            t = tl.zeros((TM, TN), dtype=tl.int32)
        else:
            t = tl.zeros((TM, TN), dtype=tl.float32)
        if NIB:  # one K=16 dot per nibble index j (k = 8i + j): the words are never reshaped
            gw = g_lo + (g - g_lo) % 2 if ABLATE == 2 else g  # noload: the first two groups, L2-resident
            words = tl.load(wq_ptr + along0((gw * 16 + offs_i) * N, SW) + along1(offs_n, SW), mask=along1(mask_n, SW),
                            other=0)
            if BITS == 5:  # bit 4 of q[k] is bit j of wh[g*16 + i]; 5-bit codes q[8i + 2jp + h] as
                # bits 8jp..8jp+4 of words[h]: nibbles, and the fifth bits spread there by one multiply
                hb = tl.load(wh_ptr + along0((gw * 16 + offs_i) * N, SW) + along1(offs_n, SW),
                             mask=along1(mask_n, SW), other=0).to(tl.int32)
                q5 = (words & 0x0F0F0F0F | spread_even(hb), (words >> 4) & 0x0F0F0F0F | spread_even(hb >> 1))
            if AP:
                a3_cur = a3
                a3 = tl.load(a3_ptrs + (g + 1) * BK, mask=a3_mask & (g + 1 < g_hi), other=0.0)
            for jp in tl.static_range(4):  # int4: nibbles 2jp, 2jp+1 from one shift, the odd one as 16 q (SH=4)
                x = words >> (8 * jp)
                for h in tl.static_range(2):
                    if AP:
                        a = plane(a3_cur, 2 * jp + h)
                    else:
                        a = tl.load(a_rows + g * BK + along1(8 * offs_i, SW) + 2 * jp + h, mask=along0(mask_m, SW),
                                    other=0.0)
                    if BITS == 5:
                        t = dot16(a, (q5[h] >> (8 * jp)) & 31, t, OFF, HW, 0, SW, ABLATE == 1, INT8)
                    else:
                        t = dot16(a, x & (15 << (4 * h)), t, OFF, HW, 4 * h, SW, ABLATE == 1, INT8)
        for kk in tl.static_range(0, 0 if NIB else BK, KS):  # KS-wide steps through the group
            k0 = g * BK + kk
            a = tl.load(a_rows + k0 + offs_k[None, :], mask=mask_m[:, None], other=0.0)
            if PREDEQ:  # the call's unpacked operand: no unpack between the MMAs
                w8 = tl.load(w8_cols + k0 + offs_k[:, None], mask=mask_n[None, :], other=0.0)
            else:
                c = load_codes(wq_ptr, wh_ptr, k0, offs_n, mask_n, N, BITS, KS, BN)
                if INT8 or not DOT16:
                    w8 = w8_operand(c - OFF, INT8, HW)
            if INT8:
                t = tl.dot(a, w8, t, out_dtype=tl.int32)
            elif DOT16:
                t = dot16(a, c, t, OFF, HW)
            else:
                t = tl.dot(a.to(tl.float8e4nv, bitcast=True), w8.to(tl.float8e4nv, bitcast=True), t)
        t = t.to(tl.float32)
        sz = tl.load(sz_ptr + g * N + offs_n, mask=mask_n, other=0)
        s = sz_scale(sz)
        if ZPE:
            contrib = t * along1(s, SW)
        else:
            d = (sz >> 16).to(tl.float32)
            rs = tl.load(rs_rows + g, mask=mask_m, other=0.0)
            contrib = t * along1(s, SW) - along1(s * d, SW) * along0(rs, SW)
        if GROUP_AS:
            asg = tl.load(as_rows + g, mask=mask_m, other=0.0)
            acc += along0(asg, SW) * contrib
        else:
            acc += contrib
    if SW:  # back to the [BM, BN] frame for the epilogue
        acc = tl.trans(acc)
    if ZPE:
        for gc in range(g_lo, g_hi, BG):
            offs_g = gc + tl.arange(0, BG)
            mask_g = offs_g < g_hi
            rsa = tl.load(rs_rows[:, None] + offs_g[None, :], mask=mask_m[:, None] & mask_g[None, :], other=0.0)
            if GROUP_AS:
                rsa *= tl.load(as_rows[:, None] + offs_g[None, :], mask=mask_m[:, None] & mask_g[None, :], other=0.0)
            mask_gn = mask_g[:, None] & mask_n[None, :]
            szc = tl.load(sz_ptr + offs_g[:, None] * N + offs_n[None, :], mask=mask_gn, other=0)
            sd = sz_scale(szc) * (szc >> 16).to(tl.float32)
            acc -= tl.dot(rsa, sd, input_precision=ZPE_PREC)
    if not GROUP_AS:
        acc *= tl.load(as_rows, mask=mask_m, other=0.0)[:, None]
    store_tile(acc, ws_ptr, out_ptr, cnt_ptr, offs_m, offs_n, mask_m, mask_n, M, N, stride_om, SPLIT, not HW, RW)


def _pow2_at_least(x: int, lo: int) -> int:
    return max(lo, 1 << max(0, (x - 1).bit_length()))


def _block_n(bounds: list[int], want: int) -> int:
    bn = want
    while bn >= 16 and any(b % bn for b in bounds[1:-1]):
        bn //= 2
    if bn < 16:
        raise ValueError(f"w4a8_gemm: partition bounds {list(bounds)} must be multiples of 16")
    return bn


#: Decode tile configs by name (``config(..., override)`` can also set any key; dot16 / nib8 run int8 activations as
#: exact fp16 too, the others give int8 its int8 dot). "split": the first version (fp32 partials summed by two host
#: launches, fp8 dot — which Triton runs as fp16 mma at M=16 on sm_90 after int→fp16→e4m3→fp16). "fused": partials
#: summed in the kernel (last-arriving program, split order), fp16 dot. "nib8": one K=16 dot per nibble index, the
#: packed words go straight to the mma operand layout; "nib8w": its 256-wide tile on 8 warps; "nib8x": 256 wide on 4
#: warps (per-warp activation work over twice the columns; 188 registers, 2 programs per SM). Nibble pairs share one
#: shift (:func:`dot16` SH). "swap" (swap-AB): the same nib8 loop in the transposed frame, ``outT [BN, BM] = (q - off)
#: [BN, K] · aT [K, BM]``, so the register-unpacked weight tile is the MMA's M side (wgmma on sm_90, A from registers)
#: and the token tile (16) its N; BN=128 on 4 warps (ptxas sm_90: 217 registers, no spill with Triton 3.6). It takes
#: each group's activations one group ahead (``apre``). Meant for M <= 16 (BM=16): at BM=64 it spills 256 B. H200 call 6
#: (M=8) put it behind nib8xpr everywhere (qkv 36.1 vs 28.5 us); its register-capped and 256-wide siblings (swapr /
#: swapw / swapx) were slower still and are gone. ``apre``: the group's activations as one tile loaded a group ahead,
#: the 8 nibble planes split in registers (the per-plane loads each sit behind a dot's operand-staging barrier: one L2
#: round trip per dot on the critical path, ~3 us per group per program in nib8x); "nib8xp" is nib8x with it (209 regs,
#: 1044 loop instructions with Triton 3.6 vs nib8x's 168 and 1173), "nib8xpr" capped at 168 registers (3 programs per
#: SM; no spill with 3.6, 236 B with 3.7.1), "nib8p" nib8 with it (126 registers with 3.6: 4 per SM; 214 with 3.7.1;
#: capped at 96 / 80 registers for 5 / 6 per SM it ran no faster, H200 call 24: gate_up M=8 62.3 / 82.9 vs 69.0 us, qkv
#: 33.0 / 42.1 vs 33.1 — residency is not this loop's limit). "gemv" / "gemv256" / "gemv1k" (int8 activations, M <=
#: GEMV_BM_MAX; "gemv_o8" the default at M <= GEMV_MAX_M): no MMA — the CUDA-core kernel of :mod:`.gemv`, 4-way byte dot
#: products on BN columns x all tokens (ptxas sm_90, M=1: 40 registers, 0.047 warp-instructions per weight; no barriers
#: and no operand staging in its loop). BN is capped at 2048 / BM (BM=16 x 256 spills). H200 call 11 (M=1, us, vs the
#: best e4m3 tensor-core config): qkv 20.3 vs 26.6, gate_up 41.4 vs 57.8, down 29.6 vs 33.2. Its "_o8" / "_o16" siblings
#: split the groups over 8 / 16 programs per SM (40 registers allow 16): the loop keeps few loads in flight per thread,
#: so memory parallelism comes from resident warps. H200 call 22 (int4, us, gemv / best of _o8, _o16, 256_o16): M=1 qkv
#: 20.7 / 17.9, gate_up 43.4 / 34.0, down 30.1 / 22.6; M=2 gate_up 63.2 / 36.5; M=4 it beats the MMA loop on all but
#: down (gate_up 53.4 vs 61.2). Since session 5 the gemv configs also take e4m3 activations (fp32 FMAs on exactly
#: biased codes, :mod:`.gemv`): H200 call 28, M = 1, best gemv vs the best MMA config: qkv 20.2 vs 26.7, gate_up 36.7 vs
#: 57.7, down 27.9 vs 33.2 us. "rw" (all configs) is the split reduction's partials per L2 round trip (None: auto — 4,
#: and on the mma2 kernel the width with the fewest round trips, :func:`reduce_steps`): the gemv "r" siblings take 8 /
#: 16, which pays where a tile has many splits of few groups (o_proj, 48 splits of one group: 15.5 -> 12.3 us, call 29)
#: and costs residency elsewhere (its registers lift the 32-register gemv loop to ~50). The mma2 kernel's reduction
#: (since session 27) reads tile-local partials ``[tiles, S, BM, BN]`` in 16-byte vectors, one address per partial, in
#: ``[rows, BN]`` chunks (:func:`reduce_rows`), whatever its MMA frame; before, it read ``[S, M, N]`` one element per
#: load in the MMA layout, and the wgmma form at M = 64 afforded one partial per round trip. H200 call 170 (served
#: picks, GEMM alone, one run, bit-identical outputs, µs before / after): o_proj M = 64 e4m3 21.8 / 17.9, M = 32 15.8 /
#: 13.4, down M = 64 41.1 / 35.5, qkv M = 8 int8 15.4 / 12.9, o_proj M = 8 9.8 / 9.1; 1.00-1.22x on 37 of 40 rows (the
#: int8 o_proj M = 32 / 64 pick of then, mma8n64t2o12, 0.98 / 0.96x; the table now takes others there, call 171).
#: "mma2*" (decode band, int4, NVIDIA): the Gluon kernel of :mod:`.mma2` (16-token tiles, swap-AB 8; more tokens as
#: adjacent programs of the same columns), both MMA operands loaded in their fragment layouts; "p" / "p2" load the
#: fragments one / two groups ahead, "n64" is 64 columns on 2 warps at 8 programs per SM.
#: H200 calls 32-35 (M = 8 e4m3, us, vs nib8xpr): mma2p2 gate_up 52.9 vs 66.2, qkv 25.2 vs 28.3; mma2n64p o_proj 15.1
#: vs 19.0. Measured and removed (slower everywhere): 4 programs per SM, 256 columns, n64 without prefetch, n64 at 4
#: programs per SM, n64 two groups ahead; (session 6) 16-byte weight runs regrouped in registers (calls 36, 38), a
#: 128-register cap at 4 programs per SM (call 37), 256 columns again (call 40), 16 partials per reduction step on n64
#: (call 41). Since call 38 the group's scales and sums are prefetched with its fragments (one group ahead: qkv M = 4
#: e4m3 27.9 -> 24.4 us; two ahead now costs residency, 212 registers).
#: "mma8*" (``k8``): the same kernel on 8-bit MMA operands (m16n8k32: s8 x s8 for int8 activations, 313 against 562
#: loop instructions per group on fp16 operands; e4m3 x e4m3 has no native mma.sync on sm_90 — ptxas splits it into
#: fp16 MMAs, so e4m3 stays on "mma2*"). H200 call 40 (int8 group, us, mma8n64p vs the best fp16-operand config): qkv
#: M = 8 19.5 vs 27.1, gate_up 44.3 vs 58.3, down 23.5 vs 35.9, o_proj 13.1 vs 16.2; at M = 2 it also beats the gemv
#: configs on all but gate_up (qkv 18.4 vs 22.8), at M = 1 on down and in_proj.
#: "*t*" (``ring``, sm_90): the same kernels with the weight, activation and scale words brought by TMA into a ring of
#: ``ring`` group tiles (:mod:`.mma2`); "t2" two stages, "o12" 12 programs per SM ("o6": 6 — o_proj's shape at M =
#: 12-16 in 4 splits, int8 12.6 against 13.2 us at "o12"'s 8, call 100; "o16": 16 — gate_up at M = 8 in 3 splits,
#: faster than 2 with its silu-mul producer, call 105). H200 call 62 (M = 8, us, best ring /
#: best register-fed config): e4m3 gate_up 42.7 / 49.8, down 24.5 / 32.6, qkv 20.4 / 23.0; int8 gate_up 38.4 / 43.4,
#: down 21.7 / 22.6, o_proj 12.1 / 12.0. Measured and removed: 6- and 8-stage rings (slower everywhere, calls 58, 61),
#: the row inputs two groups ahead beside a weight-only ring (call 56), a cp.async ring of the weight words (each
#: thread copying its own: slower on every row, call 60). "*s" (``swap``, with a ring): swap-AB, the weights on
#: the MMA's rows (:mod:`.mma2` SWAP). H200 call 67 (M = 8, us, best swap / best non-swap ring config): e4m3 gate_up
#: 32.2 / 42.6, qkv 16.2 / 20.3, down 20.1 / 24.9; int8 gate_up 30.2 / 38.4, qkv 15.6 / 17.6, o_proj 11.2 / 12.1; it
#: also beats the gemv configs at M = 1, 2 on all but int8 gate_up at M = 1 (gemv_o16 27.4 / 28.6). 4-stage swap
#: rings lost everywhere (call 67) and are gone. int5 weights run on the ring configs (the fifth-bit bytes in each
#: stage; "mma8*" with int8 activations only; the register-fed configs refuse int5): H200 call 82, M = 8, 1.71-2.10x
#: nib8 / gemv.
#: Splits: "occ" aims at occ programs per SM, otherwise
#: :func:`_balanced_splits`. ``ablate`` (bench only, wrong results; M <= 16): nib8 loops: "nodot" weight loads + unpack
#: with no MMA, "noload" unpack + MMA on the tile's first two groups re-read (L2-resident: no DRAM weight stream); mma2:
#: "nodot" the fragments' words consumed with no operands, MMAs or fold, "nofold" no scale fold, "ring" (ring configs)
#: the TMA ring alone, no fragment read (:data:`ABLATIONS`).
def _loop(**knobs) -> dict:
    """A complete decode loop config (every knob set, so a named config passed as an override replaces the
    default's knobs rather than inheriting them): the nib8 loop, kernel-side reduce, unless ``knobs`` say."""
    return dict(occ=None, reduce="kernel", dot16=True, nib8=True, swap=False, apre=False, maxnreg=None,
                gemv=False, mma2=False, pf=0, k8=False, rw=None, ring=0, wg=False) | knobs


DECODE = {
    "split": _loop(BN=64, num_warps=4, num_stages=4, occ=4, reduce="host", dot16=False, nib8=False),
    "fused": _loop(BN=64, num_warps=4, num_stages=4, nib8=False),
    "nib8": _loop(BN=128, num_warps=4, num_stages=4),
    "nib8w": _loop(BN=256, num_warps=8, num_stages=3),
    "nib8x": _loop(BN=256, num_warps=4, num_stages=3),
    "nib8xp": _loop(BN=256, num_warps=4, num_stages=3, apre=True),
    "nib8xpr": _loop(BN=256, num_warps=4, num_stages=3, apre=True, maxnreg=168),
    "nib8p": _loop(BN=128, num_warps=4, num_stages=4, apre=True),
    "swap": _loop(BN=128, num_warps=4, num_stages=3, swap=True, apre=True),
    "gemv": _loop(BN=512, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True),
    "gemv256": _loop(BN=256, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True),
    "gemv1k": _loop(BN=1024, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True),
    "gemv_o8": _loop(BN=512, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=8),
    "gemv_o16": _loop(BN=512, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=16),
    "gemv256_o16": _loop(BN=256, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=16),
    "gemv128_o16": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=16),
    "gemv_o8r": _loop(BN=512, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=8, rw=8),
    "gemv256_o16r": _loop(BN=256, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=16, rw=16),
    "gemv128_o16r": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, gemv=True, occ=16, rw=16),
    "mma2": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True),
    "mma2p": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, pf=1),
    "mma2n64p": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, pf=1),
    "mma2p2": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, pf=2),
    "mma8p": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, pf=1, k8=True),
    "mma8n64p": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, pf=1, k8=True),
    "mma2t": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, ring=4),
    "mma2n64t": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, ring=4),
    "mma8t": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, k8=True, ring=4),
    "mma8n64t": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, k8=True,
                      ring=4),
    "mma8n64t2": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, k8=True,
                       ring=2),
    "mma8n64t2o12": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=12, k8=True,
                          ring=2),
    "mma2t2": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, ring=2),
    "mma2n64t2": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, ring=2),
    "mma2n64t2o12": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=12, ring=2),
    "mma2n64t2s": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, ring=2, swap=True),
    "mma8n64t2s": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=8, k8=True, ring=2,
                        swap=True),
    "mma2t2s": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, ring=2, swap=True),
    "mma8t2s": _loop(BN=128, num_warps=4, num_stages=1, dot16=False, nib8=False, mma2=True, k8=True, ring=2,
                     swap=True),
    "mma2n64t2so12": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=12, ring=2,
                           swap=True),
    "mma8n64t2so12": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=12, k8=True,
                           ring=2, swap=True),
    "mma8n64t2so6": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=6, k8=True,
                          ring=2, swap=True),
    "mma2n64t2so16": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=16, ring=2,
                           swap=True),
    "mma8n64t2so16": _loop(BN=64, num_warps=2, num_stages=1, dot16=False, nib8=False, mma2=True, occ=16, k8=True,
                           ring=2, swap=True),
}
#: "*b32" / "*b64": the unswapped ring configs on 32- / 64-token tiles — each group's weight words unpacked once for
#: all of a tile's tokens (the MMAs repeat down the rows), against once per 16 tokens (the decode band past 16 tokens).
DECODE |= {f"{name}b{bm}": {**DECODE[name], "BM": bm} for bm in (32, 64)
           for name in ("mma2t2", "mma2n64t2o12", "mma8n64t2", "mma8n64t2o12")}
#: "wg*" (``wg``, sm_90): the swap-AB ring on wgmma — a group's weights converted once in registers into the 8-bit A
#: operand (one ``prmt`` lookup per four codes), all of a column tile's tokens (8-64) the B operand read from the
#: activation stage as it landed (:mod:`.mma2` WG); "n64" one warpgroup (64 columns), else two; "t2" / "t4" ring depth,
#: "o*" programs per SM. H200 call 161 (int4, M = 16-64, µs, best wg / best mma.sync config): e4m3 1.12-1.61x (gate_up
#: M = 64 69.6 / 112.2), int8 0.78-1.07x; at M <= 8 0.80-1.00x (call 162). One warpgroup at 2 stages won every row
#: but gate_up M = 16 (two warpgroups, call 161).
DECODE |= {f"wg{n}t{ring}o{occ}": _loop(BN=bn, num_warps=bn // 16, num_stages=1, dot16=False, nib8=False, mma2=True,
                                        k8=True, swap=True, wg=True, ring=ring, occ=occ)
           for n, bn in (("n64", 64), ("", 128)) for ring in (2, 4) for occ in (2, 4, 8, 12, 16)
           if 4 <= occ <= 8 or (bn, ring) == (64, 2)}
#: "*r{cap}": a served pick under a ptxas register cap (``maxnreg``) so that the programs its ``occ`` sizes the grid
#: for fit an SM's 64 K registers at once (ptxas sm_90, Triton 3.6, int4; ``tools/device/sm90_report.py`` prints the
#: fit). Uncapped, ``mma2n64t2so16`` / ``mma8n64t2so16`` hold 68-72 registers: 14 programs fit, not 16, and the grid
#: runs a second wave of 264; at 64, 16 fit (e4m3: 4 bytes spilled outside the group loop, 332 loop instructions
#: against 342). ``mma2n64t2o12`` holds 94: 10 fit, not 12; at 80, 12 (no spill, 425 against 439). ``wgn64t2o8`` at
#: M = 16 holds 61: its 8 programs take the whole register file, none left for a programmatic-dependent producer
#: beside its tail; at 56 (what it held before session 27's split reduction, when the e4m3 M = 16 linears were 2-5 %
#: faster, call 176) a producer warp fits, no spills — M <= 16 only: ptxas refuses the cap for 64 tokens.
REGISTER_CAPS = {"mma2n64t2so16": 64, "mma8n64t2so16": 64, "mma2n64t2o12": 80, "wgn64t2o8": 56}
DECODE |= {f"{name}r{cap}": {**DECODE[name], "maxnreg": cap} for name, cap in REGISTER_CAPS.items()}
#: Both activation elements at M <= GEMV_MAX_M run the CUDA-core kernel (:mod:`.gemv`) by default (a GPU's tuned
#: table decides per shape and width; e4m3 since H200 call 30: gemv_o8 beat the MMA loop at M = 1 on every shape),
#: above it the nib8 MMA loop. int8: ``dp4a`` issues at ~16 lanes / clock / SM
#: on the H200 (call 11: qkv M=8 takes 37.4 us, the 147 M dp4a lane-ops at that rate). H200 call 17: int4
#: from M = 4 the MMA loop wins (qkv 28.4 vs 29.8 us), int5 the gemv up to M = 8 (its MMA loop pays the
#: fifth-bit unpack: gate_up 99 vs 127 us).
GEMV_MAX_M = 2
GEMV_BM_MAX = 16  # the kernel's token tile limit (registers)
GEMV_DEFAULT = "gemv_o8"
ABLATIONS = {"none": 0, "nodot": 1, "noload": 2, "nofold": 3, "ring": 4}
#: H200 call 6 (Triton 3.6, int4, e4m3 per-group, M=8, us; nib8x / nib8xpr): qkv 42.4 / 28.5, o_proj
#: 27.0 / 21.0, gate_up 86.8 / 65.5, down 54.8 / 36.9 — best or within 9 % of the best config on every
#: shape (nib8p wins o_proj / down / out_proj by 1.6-1.8 us; the tuned table picks it there).
DECODE_DEFAULT = "nib8xpr"
#: Prefill tile configs by name: "k32" is the first version (128x128, K steps of 32 in the group);
#: "k64" steps 64 (half the wgmma issues and scale-fold barriers; no spill since the activation tile
#: loads as fp8 straight into the wgmma's shared operand), "k64s4" adds a pipeline stage, "n256" is
#: 128x256 (fewest instructions per MAC, ~1 KB spill per ptxas).
#: ``predeq`` (pre-dequantised; vLLM's AWQ path likewise dequantises, then runs cuBLAS, above 256 tokens):
#: per call :func:`unpack_w8` writes the weights once as the 8-bit operand ``w8 [N, K]`` (K-contiguous:
#: both fp8 wgmma operands K-major), then the same kernel's KS loop loads its [KS, BN] tiles straight into
#: the MMA (no unpack between the MMAs; costs a second launch, N*K bytes of scratch and ~2 N*K bytes more
#: DRAM traffic per call). "deq": 128x128, one KS=128 step per group (H200 call 13: 2.3-2.5x k64; the
#: per-group scale fold is now ~40 % of the loop and, at 213 registers x 8 warps, one program per SM waits
#: on each group's wgmma before folding it); "deqs4": a fourth stage; "deq64": two KS=64 steps; "deqm64"
#: (64x128, 4 warps, "deqm64s2" 2 stages) and "deqn64" (128x64, 4 warps): two programs per SM, so one
#: folds while the other's wgmma runs. (128x256 spilled 0.6-1.3 KB and ran at half speed: dropped.)
#: "blockwise": no kernel of ours past the unpack — the library's 1x128-block-scaled fp8 GEMM on the same operand
#: with the zero folded in (:mod:`.blockwise`; int4 e4m3 on sm_90 only, raises elsewhere; tile keys unused).
#: "wgmma": the same predeq operand through our Gluon Hopper kernel (:mod:`.wgmma`: TMA ring of ``num_stages`` groups,
#: two groups' asynchronous wgmmas in flight while one folds; every width and activation element; sm_90 only, K a
#: multiple of 256); "wgmmam64": 64x128 on 4 warps (two programs per SM; H200 calls 48-49: the faster at M = 128
#: and 2048 on every shape, "wgmma" at M = 8192 on gate_up / down). A three-stage "wgmmas3" won no shape (dropped).
#: "wgmmaws" (``ws``): the same tile and math, persistent and warp-specialised — a loader warp keeps a 4-stage ring
#: full across tiles, two MMA warpgroups each fold their 64 rows and hand stages back by mbarrier
#: (:func:`.wgmma._w4a8_wgmma_ws_kernel`; ``num_warps`` 4 = the default partition, one MMA warpgroup). H200 call 132
#: (GEMM alone, M = 2048, TF/s against the best of wgmma / wgmmam64): e4m3 per-token qkv 912 / 754, gate_up 835 / 721;
#: int8 per-group 679 / 615, 674 / 595. A 6-stage ring measured the same (dropped); the next tile's first MMAs started
#: in this tile's last folds (call 133) spilled the in-flight sums and ran 2-3x slower (reverted).
def _tiles(**knobs) -> dict:
    """A complete prefill config (``predeq`` always set, so a named config passed as an override never
    inherits the default's)."""
    return dict(GROUP_M=8, predeq=False, blockwise=False, wgmma=False, ws=False) | knobs


PREFILL = {
    "k32": _tiles(BM=128, BN=128, KS=32, num_warps=8, num_stages=3),
    "k64": _tiles(BM=128, BN=128, KS=64, num_warps=8, num_stages=3),
    "k64s4": _tiles(BM=128, BN=128, KS=64, num_warps=8, num_stages=4),
    "n256": _tiles(BM=128, BN=256, KS=32, num_warps=8, num_stages=3),
    "deq": _tiles(BM=128, BN=128, KS=128, num_warps=8, num_stages=3, predeq=True),
    "deqs4": _tiles(BM=128, BN=128, KS=128, num_warps=8, num_stages=4, predeq=True),
    "deq64": _tiles(BM=128, BN=128, KS=64, num_warps=8, num_stages=3, predeq=True),
    "deqm64": _tiles(BM=64, BN=128, KS=128, num_warps=4, num_stages=3, predeq=True),
    "deqm64s2": _tiles(BM=64, BN=128, KS=128, num_warps=4, num_stages=2, predeq=True),
    "deqn64": _tiles(BM=128, BN=64, KS=128, num_warps=4, num_stages=3, predeq=True),
    "blockwise": _tiles(BM=128, BN=128, KS=128, num_warps=8, num_stages=3, blockwise=True),
    "wgmma": _tiles(BM=128, BN=128, KS=128, num_warps=8, num_stages=4, predeq=True, wgmma=True),
    "wgmmam64": _tiles(BM=64, BN=128, KS=128, num_warps=4, num_stages=4, predeq=True, wgmma=True),
    "wgmmaws": _tiles(BM=128, BN=128, KS=128, num_warps=4, num_stages=4, predeq=True, wgmma=True, ws=True),
}
PREFILL_DEFAULT = "deq"  # H200 call 13: 2.3-2.5x k64 at M=2048 (403-450 TF/s), bit-identical output
#: The prefill default where :mod:`.blockwise` runs (int4, e4m3, sm_90 with CUDA >= 12.9). H200 call 21 (int4 e4m3
#: group, TF/s incl. the per-call unpack, blockwise / deqm64): M = 2048 qkv 839 / 453, gate_up 910 / 462, down 924 /
#: 462; M = 8192 997-1011 / 466-483; at M = 128 it wins down and gate_up, not qkv (the tuned table says per shape).
BLOCKWISE_DEFAULT = "blockwise"
#: The prefill default where :mod:`.blockwise` does not run but :mod:`.wgmma` does (int8 activations, int5 weights on
#: sm_90, K a multiple of 256): its warp-specialised form above ``WS_MIN_M`` rows, the 64-row tiles at or below.
#: Served, TF/s incl. the per-call unpack: H200 call 136, int8 per-group ZPE at M = 2048 and 8192, wgmmaws / wgmmam64
#: 619 / 579 on qkv, 630 / 595 on gate_up, 682 / 591 on gate_up at 8192 (all 12 rows, int4 and int5); int5 e4m3
#: per-group, µs as ws / m64: H200 call 155 0.87-0.94 at M = 2048 and 8192 (every row), H100 call 198 0.86-0.93 (every
#: row of five shapes); at M = 128 the 64-row tiles win 6 of the 8 rows (ws / m64 0.97-1.21).
WGMMA_DEFAULT = "wgmmam64"
WGMMA_WS_DEFAULT, WS_MIN_M = "wgmmaws", 128
_KEYS = {"BM", "BN", "KS", "GROUP_M", "splits", "num_warps", "num_stages", "occ", "reduce", "rw", "dot16", "nib8",
         "swap", "ablate", "maxnreg", "apre", "gemv", "mma2", "pf", "k8", "predeq", "blockwise", "wgmma", "ring", "ws",
         "wg"}


def _balanced_splits(tiles: int, G: int, M: int) -> int:
    """Split count minimising the busiest SM's work: ceil(tiles*s / SMs) programs, each streaming
    ceil(G/s) groups plus ~1 group of pipeline ramp and M/8 groups' worth of fp32 partial traffic
    (a [M, BN] fp32 partial written and read back vs a [128, BN] int4 group), with at least two
    programs per SM where G allows (one program's pipeline keeps too few bytes in flight to stream at
    full rate). Ties: fewer splits."""
    def cost(s: int) -> float:
        return triton.cdiv(tiles * s, _SMS) * (triton.cdiv(G, s) + 1 + (M / 8 if s > 1 else 0))
    lo = min(G, triton.cdiv(2 * _SMS, tiles))
    return min(range(lo, max(lo, min(G, 32)) + 1), key=lambda s: (cost(s), s))


def config(M: int, N: int, K: int, band: str, interp: bool, override: dict | None = None,
           decode: str = DECODE_DEFAULT, prefill: str = PREFILL_DEFAULT) -> dict:
    """Tile configuration for a band ("decode" / "prefill"), with ``override`` keys replacing the
    defaults (a whole named config of :data:`DECODE` / :data:`PREFILL`, or single keys; ``splits``
    fixes the split count); ``decode`` / ``prefill`` name the bands' defaults (an op whose kernel has no
    predeq passes a prefill default without it); the interpreter gets large, few tiles.

    KS is the k step inside a 128-group: prefill 128x128 tiles step 64 (at KS=128 the unpacked weight
    tile spills per ptxas for sm_90; 64 measured 1.36-1.39x faster than 32 on the H200); ``predeq``
    (prefill only, not with dot16 / nib8) loads tiles already unpacked: no spill at 128. On a GPU with
    a committed table (:mod:`.tuned`) :func:`launch` passes the shape's A/B winner as ``override``."""
    override = dict(override or {})
    if override.keys() - _KEYS:
        raise ValueError(f"w4a8_gemm config: unknown keys {sorted(override.keys() - _KEYS)}; known {sorted(_KEYS)}")
    G = K // GROUP
    if band == "decode":
        cfg = dict(BM=_pow2_at_least(min(M, DECODE_MAX_M), 16), KS=GROUP, GROUP_M=1, **DECODE[decode])
        if interp:
            cfg.update(BN=128, splits=min(2, G))
    elif interp:
        cfg = dict(BM=32, BN=128, KS=64, GROUP_M=8, splits=1, num_warps=8, num_stages=3)
    else:
        cfg = dict(splits=1, **PREFILL[prefill])
    base = dict(occ=None, reduce="kernel", rw=None, dot16=False, nib8=False, swap=False, ablate="none", maxnreg=None,
                apre=False, gemv=False, mma2=False, pf=0, k8=False, predeq=False, blockwise=False, wgmma=False, ring=0,
                ws=False, wg=False)
    cfg = base | cfg | override
    if cfg["gemv"]:
        if band != "decode" or M > GEMV_BM_MAX:
            raise ValueError(f"w4a8_gemm config: gemv is a decode kernel for M <= {GEMV_BM_MAX}, got {band} M={M}")
        if cfg["dot16"] or cfg["nib8"] or cfg["swap"] or cfg["apre"] or cfg["ablate"] != "none":
            raise ValueError("w4a8_gemm config: gemv has no dot16 / nib8 / swap / apre / ablate (no MMA)")
        cfg["BM"] = _pow2_at_least(M, 1)  # tokens are registers here: no 16-row MMA tile
        cfg["BN"] = min(cfg["BN"], max(128, 2048 // cfg["BM"]))  # ptxas sm_90: BM=16 x 256 spills
    if cfg["pf"] not in (0, 1, 2) or (cfg["pf"] and not cfg["mma2"]):
        raise ValueError(f"w4a8_gemm config: pf (groups of fragments loaded ahead: 0, 1, 2) is a knob of the mma2 "
                         f"kernel, got {cfg['pf']!r}")
    if cfg["mma2"]:
        if band != "decode" or M > DECODE_MAX_M:
            raise ValueError(f"w4a8_gemm config: mma2 is a decode kernel for M <= {DECODE_MAX_M}, got {band} M={M}")
        if cfg["dot16"] or cfg["nib8"] or cfg["apre"] or cfg["gemv"] or \
                cfg["ablate"] not in ("none", "nodot", "nofold", "ring" if cfg["ring"] else "none"):
            raise ValueError("w4a8_gemm config: mma2 has no dot16 / nib8 / apre / gemv / ablate but nodot, nofold, "
                             "ring (ring configs)")
        if cfg["wg"] and not (cfg["swap"] and cfg["k8"] and cfg["ablate"] == "none" and cfg["num_warps"] % 4 == 0
                              and cfg["BN"] == 16 * cfg["num_warps"]):
            raise ValueError("w4a8_gemm config: wg (wgmma decode) is a swap-AB ring config on 8-bit operands, no "
                             f"ablation, 64 weight rows per warpgroup (BN = 16 num_warps), got swap={cfg['swap']}, "
                             f"k8={cfg['k8']}, ablate={cfg['ablate']!r}, BN={cfg['BN']}, num_warps={cfg['num_warps']}")
        if cfg["swap"]:  # swap-AB: weights on the MMA's rows, tiles of up to 8 tokens on its columns (wg: up to
            if not cfg["ring"] or cfg["ablate"] == "nodot":  # the decode band's 64, one tile for all tokens)
                raise ValueError(f"w4a8_gemm config: mma2 swap needs a ring (no nodot ablation), got "
                                 f"ring={cfg['ring']}, ablate={cfg['ablate']!r}")
            cfg["BM"] = _pow2_at_least(min(M, DECODE_MAX_M), 8) if cfg["wg"] else 8
        else:  # token tiles of 16 (the MMA's rows) unless the named config sets 32 / 64 (one weight unpack for
            cfg["BM"] = override.get("BM", 16)  # all its tokens); more tokens as adjacent programs of the same columns
            if cfg["BM"] not in (16, 32, 64):
                raise ValueError(f"w4a8_gemm config: mma2 token tiles are 16, 32 or 64 rows, got BM={cfg['BM']}")
    elif cfg["k8"] or cfg["ring"] or cfg["wg"]:
        raise ValueError("w4a8_gemm config: k8 (8-bit MMA operands), ring (TMA operand stages) and wg (wgmma) are "
                         "knobs of the mma2 kernel")
    elif cfg["ablate"] in ABLATIONS.keys() - {"none", "nodot", "noload"}:
        raise ValueError(f"w4a8_gemm config: the nib8 loops' ablations are nodot, noload; {cfg['ablate']!r} is an "
                         "mma2 one")
    if cfg["ring"] not in (0, 2, 3, 4, 5, 6, 8) or (cfg["ring"] and cfg["pf"]):
        raise ValueError(f"w4a8_gemm config: ring (TMA stages of the group tiles: 0 = none, 2-8; pf 0 with a ring) "
                         f"got ring={cfg['ring']!r}, pf={cfg['pf']!r}")
    if cfg["ablate"] not in ABLATIONS:
        raise ValueError(f"w4a8_gemm config: ablate must be one of {sorted(ABLATIONS)}, got {cfg['ablate']!r}")
    if (cfg["swap"] or cfg["apre"] or cfg["ablate"] != "none") and not (cfg["dot16"] and cfg["nib8"] or cfg["mma2"]):
        raise ValueError("w4a8_gemm config: swap / apre / ablate act on the nib8 loop and need dot16=True, nib8=True "
                         "(swap, ablate: or mma2)")
    if cfg["ablate"] != "none" and cfg["BM"] != (8 if cfg["mma2"] and cfg["swap"] else 16):
        raise ValueError(f"w4a8_gemm config: ablate needs the decode tile, BM == 16 (swap-AB: 8), got BM={cfg['BM']}")
    if cfg["blockwise"] and band == "decode":
        raise ValueError("w4a8_gemm config: blockwise (the library block-scaled GEMM) is a prefill config")
    if cfg["wgmma"] and not cfg["predeq"]:
        raise ValueError("w4a8_gemm config: wgmma (the Gluon Hopper kernel) reads the predeq operand: set predeq")
    if cfg["ws"] and not (cfg["wgmma"] and cfg["BM"] == 128 and cfg["num_warps"] == 4):
        raise ValueError("w4a8_gemm config: ws (warp-specialised) is a form of the wgmma kernel with BM = 128 and "
                         f"num_warps = 4 (one MMA warpgroup per partition), got wgmma={cfg['wgmma']}, BM={cfg['BM']}, "
                         f"num_warps={cfg['num_warps']}")
    if cfg["predeq"] and (band == "decode" or cfg["dot16"] or cfg["nib8"]):
        raise ValueError("w4a8_gemm config: predeq runs the prefill band's 8-bit dot loop (no decode, dot16, nib8)")
    if band == "decode" and not (cfg["gemv"] or cfg["mma2"]):  # BM x BN <= 4096: BM=64 x 128 spills ~800 B (ptxas)
        cfg["BN"] = min(cfg["BN"], max(64, 4096 // cfg["BM"]))
    if "splits" not in cfg:
        tiles = triton.cdiv(N, cfg["BN"]) * triton.cdiv(M, cfg["BM"])
        if cfg["occ"]:  # tiles x splits ~ occ programs per SM
            cfg["splits"] = max(1, min(G, (cfg["occ"] * _SMS) // max(1, tiles)))
        else:
            cfg["splits"] = _balanced_splits(tiles, G, min(M, cfg["BM"]))
    cfg["per"] = triton.cdiv(G, cfg["splits"])
    cfg["splits"] = triton.cdiv(G, cfg["per"])
    if cfg["rw"] is None and cfg["mma2"]:  # auto: the fewest round trips of the mma2 reduction (ties: narrower)
        cfg["rw"] = min(RW_WIDTHS, key=lambda rw: reduce_steps(cfg["BM"], cfg["BN"], rw, cfg["num_warps"],
                                                                cfg["splits"]))
    elif cfg["rw"] is None:
        cfg["rw"] = 4
    if cfg["rw"] not in RW_WIDTHS:
        raise ValueError(f"w4a8_gemm config: rw (split partials per reduction step) must be one of {RW_WIDTHS}, got "
                         f"{cfg['rw']!r}")
    return cfg


def resolve_band(band: str, M: int, op: str) -> str:
    if band == "auto":
        return "decode" if M <= DECODE_MAX_M else "prefill"
    if band not in ("decode", "prefill"):
        raise ValueError(f"{op}: band must be 'auto', 'decode' or 'prefill', got {band!r}")
    return band


def launch(kernel, M: int, N: int, K: int, bounds: list[int], band: str, out: torch.Tensor | None, device, op: str,
           tensors: tuple, cfg: dict | None = None, decode: str = DECODE_DEFAULT, prefill: str = PREFILL_DEFAULT,
           gemv=None, mma2=None, unpacked=None, blockwise=None, hopper=None, defer: bool = False,
           reduced: bool | None = None, **constexprs) -> torch.Tensor:
    """Shared band/tile/partition plumbing: ``kernel(*tensors, ws, out, cnt, M, N, K, b1, b2, stride_om,
    groups_per_split, ..., SPLIT, HW, BM, BN, BK, KS, GROUP_M)`` (+ ``DOT16`` ... ``PREDEQ`` where the kernel
    has them); ``cfg`` overrides the tile config, ``decode`` names the decode default (:func:`config`); a
    ``gemv`` config runs the op's CUDA-core kernel ``gemv`` (same arguments up to BK, ``BITS`` /
    ``GROUP_AS``). ``unpacked()`` (where the kernel has PREDEQ) gives the call's 8-bit weight operand, which
    replaces the packed weights ``tensors[3]`` when the config sets ``predeq``; a ``blockwise`` config returns
    ``blockwise(out)`` (the op's library path) instead of a kernel launch, a ``wgmma`` one ``hopper(out, cfg)`` (the
    op's Gluon Hopper kernel). ``defer`` (decode band): return the fp32 split partials ``[S, M, N]`` as stored, no
    reduction (the consumer sums them in split order; ``out`` unused), whatever the tile config — unless ``reduced``
    (None: the tuned table's ``reduced`` mark on the pick), which hands the in-kernel split-order sum as the one fp32
    partial ``[1, M, N]``: the same bits for the consumer, from the reduced GEMM where its pair runs faster so."""
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError(f"{op}: the triton backend needs contiguous weights (prepare() output, unsliced)")
    if defer and out is not None:
        raise ValueError(f"{op}: the split partials form (defer) allocates its own output")
    if out is None:
        out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    else:
        check_out(out, M, N, op)
    if M == 0:
        return out.new_empty(1, 0, N, dtype=torch.float32) if defer else out
    has_dot16 = "DOT16" in kernel.arg_names
    if cfg and not has_dot16 and {"dot16", "nib8", "swap", "ablate", "apre", "predeq"} & cfg.keys():
        raise ValueError(f"{op}: dot16 / nib8 / swap / ablate / apre / predeq are not knobs of this kernel")
    interp = triton_interpreted()
    band = resolve_band(band, M, op)
    if defer and band != "decode":
        raise ValueError(f"{op}: split partials out (defer) is a decode-band form, got band {band!r}")
    if reduced and not defer:
        raise ValueError(f"{op}: reduced is a knob of the split partials form (defer)")
    if cfg is None and not interp and torch.device(device).type == "cuda":  # the GPU's committed A/B winner
        act = "int8" if constexprs.get("INT8") else "e4m3"
        entry = tuned.entry(torch.cuda.get_device_name(device), op, band, M, N, K, act, constexprs.get("BITS", 4),
                            defer)
        cfg = None if entry is None else (DECODE if band == "decode" else PREFILL)[entry["config"]]
        if reduced is None:
            reduced = bool(defer and entry and entry.get("reduced"))
    if reduced:  # the partials form reduced in the kernel: its fp32 sum is the one partial
        parts = torch.empty(1, M, N, dtype=torch.float32, device=device)
        out, defer = parts[0], False
    if gemv is None and cfg and cfg.get("gemv"):
        raise ValueError(f"{op}: has no gemv kernel (a W4A8 GEMM knob)")
    if mma2 is None and cfg and cfg.get("mma2"):
        raise ValueError(f"{op}: has no mma2 kernel (a W4A8 GEMM knob)")
    cfg = config(M, N, K, band, interp, cfg, decode, prefill)
    if cfg["blockwise"]:
        if blockwise is None:
            raise ValueError(f"{op}: has no blockwise path (a W4A8 GEMM prefill config)")
        return blockwise(out)
    if cfg["wgmma"]:
        if hopper is None:
            raise ValueError(f"{op}: has no wgmma kernel (a W4A8 GEMM prefill config)")
        return hopper(out, {**cfg, "BN": _block_n(bounds, cfg["BN"])})
    if cfg["gemv"]:
        kernel, has_dot16 = gemv, False
    if cfg["mma2"]:
        if interp or torch.device(device).type != "cuda" or torch.version.cuda is None:
            raise ValueError(f"{op}: the mma2 config (Gluon, inline PTX) runs on NVIDIA GPUs only; elsewhere the "
                             "Triton nib8 loop is its twin")
        if constexprs["BITS"] == 5 and (not cfg["ring"] or cfg["k8"] and not constexprs["INT8"] or cfg["wg"] or N % 16):
            raise ValueError(f"{op}: int5 weights run on the mma2 ring configs (*t*) with fp16 operands, or 8-bit ones "
                             f"for int8 activations (mma8*t*; not wg), and N a multiple of 16 (TMA rows of fifth-bit "
                             f"bytes); got ring={cfg['ring']}, k8={cfg['k8']}, wg={cfg['wg']}, "
                             f"int8={constexprs['INT8']}, N={N}")
        need = (8, 0) if constexprs["INT8"] else (8, 9)  # mma.sync m16n8k16; e4m3 pairs: cvt.rn.f16x2.e4m3x2
        if torch.cuda.get_device_capability(device) < need:
            raise ValueError(f"{op}: the mma2 config needs compute capability >= {need} for these activations")
        if cfg["wg"] and torch.cuda.get_device_capability(device)[0] != 9:
            raise ValueError(f"{op}: the wg config (wgmma) runs on sm_90 only, got compute capability "
                             f"{torch.cuda.get_device_capability(device)}")
        if cfg["ring"] and (torch.cuda.get_device_capability(device) < (9, 0) or N % 4):
            raise ValueError(f"{op}: the mma2 ring (TMA) needs compute capability >= (9, 0) and N a multiple of 4 "
                             f"(got {torch.cuda.get_device_capability(device)}, N={N})")
        kernel, has_dot16 = mma2(), False
    if cfg["reduce"] not in ("host", "kernel"):
        raise ValueError(f"{op}: reduce must be 'host' or 'kernel', got {cfg['reduce']!r}")
    bn = _block_n(bounds, cfg["BN"])
    b = list(bounds) + [N] * (4 - len(bounds))
    tiles = triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, bn)
    split = 0 if cfg["splits"] == 1 and not defer else 1 if defer or cfg["reduce"] == "host" else 2
    if split == 2 and cfg["mma2"]:  # the mma2 kernel's partials: tile-local [tiles, S, BM, BN] (:mod:`.mma2`)
        ws = torch.empty(tiles * cfg["splits"] * cfg["BM"] * bn, dtype=torch.float32, device=device)
    else:
        ws = torch.empty(cfg["splits"], M, N, dtype=torch.float32, device=device) if split else out
    cnt = counters(device, tiles, "w4a8_gemm") if split == 2 else out
    if cfg["maxnreg"]:  # ptxas register cap (more resident programs per SM)
        constexprs.update(maxnreg=cfg["maxnreg"])
    if has_dot16:
        constexprs.update(DOT16=cfg["dot16"], NIB8=cfg["nib8"], SWAP=cfg["swap"], ABLATE=ABLATIONS[cfg["ablate"]],
                          APRE=cfg["apre"], PREDEQ=cfg["predeq"])
    if cfg["predeq"]:
        tensors = (*tensors[:3], unpacked(), *tensors[4:])
    pdl = {}
    if cfg["gemv"] or cfg["mma2"]:
        keep = ("BITS", "INT8", "GROUP_AS") + (("maxnreg",) if cfg["maxnreg"] else ())  # the others are nib8's
        constexprs = {k: constexprs[k] for k in keep}
        if programmatic_launch_on(device):  # the next producer may start after the loop; this launch is the
            constexprs.update(TRIGGER=True, WAIT=True)  # dependent of the one before, scheduled as its programs exit
            pdl = {"launch_pdl": True}
    if cfg["mma2"]:
        constexprs.update(PF=cfg["pf"], K8=cfg["k8"], STAGES=cfg["ring"], ABLATE=ABLATIONS[cfg["ablate"]],
                          GPS=triton.next_power_of_2(cfg["per"]) if cfg["ring"] else 1, SWAP=cfg["swap"], WG=cfg["wg"])
        if cfg["ring"]:
            from radiance_kernels.ops.w4a8_gemm.mma2 import ring_descriptors  # Gluon: imported where it can run

            a, a_scales, a_sums, wq, wh, sz = tensors
            a, wq, sz, wh_desc = ring_descriptors(a, wq, sz, bn, cfg["BM"], wh if constexprs["BITS"] == 5 else None)
            tensors = (a, a_scales, a_sums, wq, wh if wh_desc is None else wh_desc, sz)
    elif cfg["gemv"]:
        constexprs["PTX"] = not interp and torch.version.cuda is not None and torch.device(device).type == "cuda"
    else:
        constexprs.update(KS=cfg["KS"], GROUP_M=cfg["GROUP_M"])
    kernel[(tiles, cfg["splits"])](
        *tensors, ws, out, cnt, M, N, K, b[1], b[2], out.stride(0), cfg["per"],
        SPLIT=split, RW=cfg["rw"], HW=not interp, BM=cfg["BM"], BN=bn, BK=GROUP,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **constexprs, **pdl,
    )
    if defer:
        return ws
    if split == 1:
        out[:M].copy_(ws.sum(0))
    return parts if reduced else out


def gemm(A, AS, RS, w: W4Prepared, bounds: list[int], zpe: bool, band: str = "auto",
         out: torch.Tensor | None = None, cfg: dict | None = None, defer: bool = False,
         reduced: bool | None = None) -> torch.Tensor:
    """Triton W4A8/W5A8 GEMM → bf16 [M, N] (or rows < M of ``out``; ``defer``: its fp32 split partials [S, M, N],
    ``reduced``: their in-kernel sum as one, :func:`launch`); ``cfg`` overrides :func:`config`."""
    P, M, K, N, grouped = check_inputs(A, AS, RS, w, bounds, "w4a8_gemm")
    wh = w.wh if w.bits == 5 else w.wq  # unused pointer for int4
    from radiance_kernels.ops.w4a8_gemm.gemv import _w4a8_gemv_kernel  # it imports this module's tile helpers

    int8 = A.dtype == torch.int8
    A, AS = A.contiguous(), AS.contiguous()
    no_blockwise = blockwise.unsupported(A.device, w.bits, int8)

    def library(out):
        if no_blockwise:
            raise ValueError(f"w4a8_gemm: the blockwise prefill config needs {no_blockwise}")
        return blockwise.gemm(A, AS, bounds, out, lambda: unpack_w8(w, False, zfold=True, blocks=bounds))

    def hopper(out, cfg):
        from radiance_kernels.ops.w4a8_gemm import wgmma  # Gluon: imported where it can run

        why = wgmma.unsupported(A.device, K)
        if why:
            raise ValueError(f"w4a8_gemm: the wgmma prefill config needs {why}")
        zfold = wgmma.zero_folds(w.bits, int8)
        w8, sc = unpack_w8(w, int8, zfold=zfold, scales=True)
        return wgmma.gemm(A, AS, RS.contiguous(), w8, sc, bounds, out, cfg, zfold)

    prefill = PREFILL_DEFAULT
    if resolve_band(band, M, "w4a8_gemm") == "prefill":
        prefill = prefill_default(A.device, w.bits, int8, K, M)
    return launch(
        _w4a8_kernel, M, N, K, bounds, band, out, A.device, "w4a8_gemm",
        (A, AS, RS.contiguous(), w.wq, wh, w.sz), cfg,
        gemv=_w4a8_gemv_kernel, mma2=_mma2_kernel, decode=GEMV_DEFAULT if GEMV_MAX_M >= M else DECODE_DEFAULT,
        prefill=prefill,
        unpacked=lambda: unpack_w8(w, int8), blockwise=library, hopper=hopper, defer=defer, reduced=reduced,
        BITS=w.bits, INT8=int8, GROUP_AS=grouped, ZPE=zpe, BG=16,
        ZPE_PREC="tf32x3" if torch.version.cuda and A.is_cuda else "ieee",
    )


def prefill_default(device, bits: int, int8: bool, K: int, M: int) -> str:
    """The prefill band's named config where the tuned table has no entry: the library's block-scaled GEMM where it
    runs, else the Gluon Hopper kernel where it runs (above ``WS_MIN_M`` rows its warp-specialised form), else the
    portable Triton loop."""
    if not blockwise.unsupported(device, bits, int8):
        return BLOCKWISE_DEFAULT
    if torch.device(device).type == "cuda" and not triton_interpreted():
        from radiance_kernels.ops.w4a8_gemm import wgmma  # Gluon: imported where it can run

        if not wgmma.unsupported(device, K):
            return WGMMA_WS_DEFAULT if M > WS_MIN_M else WGMMA_DEFAULT
    return PREFILL_DEFAULT


def _mma2_kernel():
    from radiance_kernels.ops.w4a8_gemm.mma2 import _w4a8_mma2_kernel  # Gluon: imported where it can run

    return _w4a8_mma2_kernel


UNPACK_BN = 64  # the unpack kernel's tile: one 128-group x 64 columns (4 warps, 64 codes per thread)


def unpack_w8(w: W4Prepared, int8: bool, zfold: bool = False, scales: bool = False,
              blocks: list[int] | None = None):
    """The ``predeq`` weight operand ``w8 [N, K]`` (K-contiguous, as fp8 / int8 wgmma wants both operands):
    ``c = q - 2^(b-1)`` (``zfold``: ``q - z``, :mod:`.blockwise`'s operand) as e4m3 bytes (uint8) for e4m3
    activations, int8 for int8 activations; ``scales``: ``(w8, sc)`` with the fold's column factors ``sc [2 G, N]``
    fp32 (rows 2g, 2g + 1: ``s[g]``, ``s[g] d[g]``; int8 and ``zfold``: ``s[g]``, ``-1.5 * 2^23 * s[g]``;
    :mod:`.wgmma`'s); ``blocks`` (partition bounds ``[0, .., N]``): ``(w8, sb)`` with the scales ``s`` fp32 flat
    ``[G N]``, partition ``[lo, hi)``'s as the contiguous ``[G, hi - lo]`` at ``G lo`` (:mod:`.blockwise`'s
    ``scale_b``). One launch, fresh buffers per call."""
    if scales and blocks is not None:
        raise ValueError("unpack_w8: the fold's column factors (scales) or s in partition blocks (blocks), not both")
    K, N = w.wq.shape[0] * 8, w.wq.shape[1]
    w8 = torch.empty(N, K, dtype=torch.int8 if int8 else torch.uint8, device=w.wq.device)
    rows = 2 * K // GROUP if scales else K // GROUP if blocks is not None else 0
    sc = torch.empty(rows, N, dtype=torch.float32, device=w.wq.device)
    b = list(blocks or [0, N]) + [N] * (4 - len(blocks or [0, N]))
    _unpack_w8_kernel[(K // GROUP, triton.cdiv(N, UNPACK_BN))](
        w.wq, w.wh if w.bits == 5 else w.wq, w.sz, w8, sc, N, K, b[1], b[2], BITS=w.bits, INT8=int8,
        HW=not triton_interpreted(), ZFOLD=zfold, SCALES=scales, BLOCKS=blocks is not None, BK=GROUP, BN=UNPACK_BN,
        num_warps=4,
    )
    if blocks is not None:
        return w8, sc.view(-1)
    return (w8, sc) if scales else w8
