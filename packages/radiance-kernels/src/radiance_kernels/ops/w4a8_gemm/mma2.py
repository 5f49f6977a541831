"""Decode W4A8 GEMM on register-fed ``mma.sync`` (Gluon; NVIDIA sm_89+ for e4m3, sm_80+ for int8 activations):
int4 weights.

The Triton loops stage every MMA operand they build in registers through shared memory (a layout conversion behind
barriers, per dot); here the layouts are explicit, so both operands are *loaded* in the MMA fragment layouts and
converted in registers: no shared memory, no barrier in the loop. Math as :mod:`.reference`, one 128-group per loop
step, with a code ``c`` of ``q`` whose offset the row-sum term absorbs (``sum a*q - z*RS = sum a*c - (z - o)*RS``)::

    t[m, n] = sum_{k in g} a[m, k] * c[k, n]        (exact products, fp32 / int32 sums)
    acc[m, n] += as(m, g) * (s[g, n] * t - s[g, n] * (z[g, n] - o) * RS[m, g])

Two operand kinds (``K8``):

- fp16 (m16n8k16, 8 MMAs per group): ``c = q - 8``, the activations converted to fp16 (exact). Step (half ``h``,
  nibble ``j``), slot ``s``: word row ``8h + s // 2`` of ``wq``, nibble ``j`` (even ``s``) or ``j + 4`` (odd ``s``), so
  a thread's fragment pair is one word: ``(w >> 8 (j // 2)) & 0x000F000F | 0x64006400`` is the pair ``1024 + q`` for
  even ``j`` (minus ``1032``: one ``sub.f16x2``), with mask ``0x00F000F0`` the pair ``1024 + 16 q`` for odd ``j`` (times
  1/16 minus 72: one ``fma.rn.f16x2``), all exact. Its activation pair is bytes ``j``, ``j + 4`` of one 8-byte word
  (``prmt``, then ``cvt.rn.f16x2.e4m3x2``; int8 by the same ``1024 +`` trick).
- 8-bit (m16n8k32, 4 MMAs per group: s8 x s8, or e4m3 x e4m3 — which sm_90's ptxas splits into fp16 MMAs, so it loses
  there): ``c = q`` (``o = 0``), the activation bytes used as stored. Step (half ``h``, ``j``), slot ``s``: word row
  ``8h + (s % 16) // 4 + 4 (s // 16)`` (a thread's two registers: rows ``8h + t``, ``8h + t + 4``), each register
  four codes of one word — e4m3: nibbles ``4j .. 4j + 3``, the four activation bytes of word half ``j`` as they are;
  the code bytes by two 8-entry ``prmt`` tables (codes 0-7, 8-15: a selector nibble with its top bit set gives 0,
  the top bit of each table's entries being 0) and an ``or``; int8: nibbles ``j, j + 2, j + 4, j + 6`` (``(w >> 4j)
  & 0x0F0F0F0F``), the activation bytes by one ``prmt``.

Loads: ``wq`` words by the B fragment, activation words by the A fragment (L1-resident; the slots of one word name it
once), the group's scale / zero words and the activations' group sums and scales with them; ``PF`` (0-2): how many
groups ahead all of these are loaded. ``STAGES`` (sm_90; ``a`` / ``wq`` / ``sz`` given as TMA descriptors,
:func:`ring_descriptors`; ``PF`` 0): the weight, activation and scale / zero words instead come by TMA into a ring of
``STAGES`` group tiles in shared memory, read from there in the fragment layouts (bytes in flight cost no registers),
and the split's row sums / scales are staged in shared memory once (``GPS`` groups at most): the loop issues no
global load, which each refill's proxy fence (``MEMBAR``) would otherwise wait for. One CTA barrier per group frees
the stage just read (Gluon adds one around each TMA issue). H200 calls 58-62: the ring alone (ablation "ring")
streams gate_up's codes and scales at 0.88-0.90 of the read ceiling at depths 2-6; the whole kernel is fastest at
depth 2 (deeper rings lost everywhere, 8 most), 1.02-1.39x the register-fed loads on the large shapes.

``SWAP`` (with ``STAGES``, ``BM`` 8): swap-AB — the weights on the MMA's 16 rows (the A operand, read from the
stage transposed), up to 8 tokens on its 8 columns (B): the tile is ``[BN, 8]``, so at M <= 8 the MMAs and the
fold cover no empty token rows (ptxas sm_90: 205 against 294 loop instructions per group and warp for int8, 338
against 440 for e4m3); more tokens run as more token tiles per column tile (M = 9-16: two; up to the decode band's
64: eight; 16-token tiles without swap-AB likewise), adjacent programs (the later ones' weight tiles come from L2
while the first's are in flight). The same K order (the unpack and activation pickers are
elementwise), only the operands' roles and the frame's axes change. H200 call 67: 1.08-1.32x the unswapped ring at
M = 4, 8 on every shape (gate_up M = 8: 32.2 / 30.2 us e4m3 / int8 against 42.6 / 38.4); at M = 9-16 (calls 95,
97) it wins only the o_proj / out_proj shape (e4m3 1.00-1.03x, int8 at M = 12-16 1.02-1.10x the unswapped ring:
13.1 against 14.2 us at M = 16; int5 e4m3 too) and loses 0.73-0.89x elsewhere: the tuned table picks it there.

int5 (``BITS`` 5; ring configs only): the fifth-bit bytes ``wh [K/8, N]`` (bit j of a byte = the fifth bit of
nibble j of the word at the same index) come by TMA as a ``[16, BN]`` tile of each stage and are read in the words'
fragment layout; step j ORs bits j, j + 4 of the byte into the pair ``1024 + q`` / ``1024 + 16 q`` (one multiply
placing both, one ``lop3``) before the exact ``- 16``. ptxas sm_90: 523 loop instructions per group and warp against
340 (swap-AB, e4m3; 634 with a shift and a mask per pair before the multiply, H200 call 82: 1.06-1.22x slower). H200
call 82: gate_up e4m3 at M = 8 43.2 us against the Triton nib8 loop's 87.6 (call 80). int8 activations also on 8-bit
operands (``K8``): the four code bytes of a register take bits j, j + 2, j + 4, j + 6 of the byte at their bit 4 by
one mask, one multiply and one ``lop3`` (349 against 205 instructions; H200 call 84: 1.05-1.39x the fp16 operands).

``WG`` (with ``SWAP``, ``K8`` and a ring; int4; sm_90): the group sums on ``wgmma`` — the weights are its A operand
from registers (a warpgroup per 64 columns), all of the column tile's tokens (``BM`` 8-64, one tile) its N, read as
B straight from the activation stage the TMA filled (the int64 words are the ``[BM, 128]`` 8-bit codes, K-major).
wgmma's A fragment wants each register's four codes consecutive in K, in natural order (B is not permuted), so a
thread reads the *halfword* holding them (nibbles ``4 i .. 4 i + 3`` of a word; the two threads of a word read its two
halves) and one ``prmt`` lookup of codes ``c = q`` makes the register (e4m3 or int8 tables: four instructions per
four codes; the row-sum term keeps ``z``): each weight is converted once per step for every token, where the mma.sync
forms convert it once per 8 / 16 / 64-token tile and, for e4m3, widen both operands to fp16 (sm_90 has no 8-bit
e4m3 ``mma.sync``). The MMA is waited for (``wait_group 0``) before the stage is refilled; the fold is the same.
ptxas sm_90 (e4m3 per-group): 0.108 warp-instructions per weight at M = 16 (mma2 16-token ring 0.107), 0.162 at
M = 64 (``*b64`` 0.221), 128 registers at M = 64 (the split reduction, :func:`_reduce_partials`, holds at most 80
values per thread). H200 call 161 (int4, µs, one run, best wg / best mma.sync config): e4m3 M = 16
1.12-1.30x (gate_up 38.7 / 43.5), M = 32 1.24-1.60x (47.0 / 75.0), M = 64 1.27-1.61x (69.6 / 112.2); int8 activations
0.78-1.07x (s8 ``mma.sync`` is native: wg wins only some M = 32-64 rows); at M <= 8 (call 162) it loses 0-13 % (e4m3)
and 7-20 % (int8).

``TRIGGER`` (:func:`radiance_kernels.backends.programmatic_launch_on`): after its group loop each program lets the
next launch start (``griddepcontrol.launch_dependents``): the next layer's producer, launched as a programmatic
dependent, is scheduled during the split reduction and the epilogue and waits there for this grid. H200 call 73
(``tools/device/probe_pdl.py``, served chains at M = 8, per linear): 0.5-0.8 us saved (out_proj 16.2 -> 15.5 us,
down 25.9 -> 25.3); the other way round — this kernel launched early as its producer's dependent, the producer
triggering as it starts and this kernel waiting in its prologue — cost 1-16 us per linear (gate_up 41.9 -> 57.6 us),
whether the wait came before or after its first weight tiles. ``WAIT``: launched as the dependent of the launch before
it, which never triggers, so this grid is scheduled as that one's programs exit (no program of this kernel waits
beside a running one) and waits at its start (``griddepcontrol.wait``) for its completion: H200 call 112, the same
chains, -0.5 to +0.1 us per linear (out_proj 15.2 -> 14.7, qkv 24.4 -> 24.1); call 113, the chained 64-layer stack
in one process: -0.05 to -4.7 % (int4 e4m3 deferred 6.59 -> 6.28 ms). Scheduled earlier — the producer triggering once
its own wait is over, so this grid lands beside the producer's programs, with the ring's weight tiles issued before
the wait — the stack lost 3-34 % (call 114): reverted.

NVIDIA-only (inline PTX, Gluon's ``mma_v2``; WG: sm_90's ``wgmma``); the portable twin is the Triton nib8 loop
(:mod:`.triton`), the same math and weight layout. Tile: 16 tokens (swap-AB: tiles of 8; WG: 8-64) x ``BN`` columns,
warps side by side along N (swap-AB: down them); splits and the split-order reduction as the Triton decode band. Not
runnable under the interpreter: tested on GPUs against the reference.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from radiance_kernels.ops.w4a8_gemm import tma_tiles
from radiance_kernels.ops.w4a8_gemm.triton import reduce_rows

_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # Triton 3.7 / 3.6 name
#: e4m3 of the codes 0..7 and 8..15, bytes little-endian: prmt's tables (two registers each)
_E4M3_TABLES = "mov.b32 t0, 0x44403800; mov.b32 t1, 0x4E4C4A48; mov.b32 t2, 0x53525150; mov.b32 t3, 0x57565554;"
#: the codes 0..15 as int8 bytes (the identity): the wgmma form's int8 operand by the same lookup
_INT8_TABLES = "mov.b32 t0, 0x03020100; mov.b32 t1, 0x07060504; mov.b32 t2, 0x0B0A0908; mov.b32 t3, 0x0F0E0D0C;"


@gluon.constexpr_function
def _lookup(sel, tables):
    """PTX: the four code bytes named by the low four nibbles of ``sel`` (a register), by two 8-entry ``prmt``
    tables (codes 0-7, 8-15: a selector nibble with its top bit set gives 0, no table entry having its top bit set)
    and an ``or``, into $0."""
    return (f"{{ .reg .b32 y, t0, t1, t2, t3, r; {tables} prmt.b32 r, t0, t1, {sel}; xor.b32 y, {sel}, 0x8888;"
            " prmt.b32 y, t2, t3, y; or.b32 $0, r, y; }")


@gluon.constexpr_function
def fifth_bits(j: int, k8: bool) -> tuple[int, int, int]:
    """``(keep, mul, mask)``: ``((hb & keep) * mul) & mask`` puts the fifth bits of step j's codes, from their byte
    ``hb`` (bit i = nibble i's), where that step's operand register wants them. fp16 pairs (nibbles j, j + 4 at
    ``1024 + q`` for even j, ``1024 + 16 q`` for odd): bit 4 / 8 of each half — the multiply makes two disjoint copies
    of the byte, bit j landing on the low half's target and bit j + 4 on the high half's. 8-bit codes (nibbles j,
    j + 2, j + 4, j + 6, a byte each): bit 4 of each byte — the copies collide only into bits the mask drops."""
    if k8:
        return 0x55 << j, 0x00410410 >> j, 0x10101010
    lo = 8 if j % 2 else 4
    return 0xFF, (1 << (lo - j)) + (1 << (lo + 12 - j)), 0x01000100 if j % 2 else 0x00100010


@gluon.constexpr_function
def _code_asm(K8, INT8, j, BITS=4):
    """PTX: MMA B elements from int32 ``wq`` words ($1; the pack's other inputs repeat it), step ``j``; int5 also from
    the words' fifth-bit bytes as int32 (fp16 operands: $3; int8: $5)."""
    if not K8:  # nibbles (j, j + 4): even j as 1024 + q, odd j as 1024 + 16 q (no shift), then exactly to q - off
        shift = f"shr.b32 w, $1, {8 * (j // 2)};" if j >= 2 else "mov.b32 w, $1;"
        off = 1 << (BITS - 1)
        fix = (f"mov.b32 m, 0x2C002C00; mov.b32 c, {_f16x2(-64 - off)}; fma.rn.f16x2 $0, t, m, c;" if j % 2 else
               f"mov.b32 c, {_f16x2(1024 + off)}; sub.rn.f16x2 $0, t, c;")  # (1024 + 16 q) / 16 - 64 - off, or
        fifth = ""  # 1024 + q - 1024 - off; int5: bits j, j + 4 of the byte to 16 (even j) / 256 (odd j) of each half
        if BITS == 5:  # (the byte needs no mask: it is zero-extended)
            _, mul, mask = fifth_bits(j, False)
            fifth = f"mul.lo.u32 x, $3, {mul:#x}; lop3.b32 t, x, {mask:#010x}, t, 0xEA;"
        return (f"{{ .reg .b32 w, t, m, c, x; {shift} lop3.b32 t, w, {0x00F000F0 if j % 2 else 0x000F000F:#010x},"
                f" 0x64006400, 0xEA; {fifth} {fix} }}")
    if INT8:  # int5: bits j, j + 2, j + 4, j + 6 of the byte ($5) to bit 4 of each code byte
        if BITS == 5:
            keep, mul, mask = fifth_bits(j, True)
            return (f"{{ .reg .b32 x, y; shr.b32 x, $1, {4 * j}; and.b32 x, x, 0x0F0F0F0F; and.b32 y, $5, {keep:#x};"
                    f" mul.lo.u32 y, y, {mul:#x}; lop3.b32 $0, y, {mask:#010x}, x, 0xEA; }}")
        return f"{{ .reg .b32 x; shr.b32 x, $1, {4 * j}; and.b32 $0, x, 0x0F0F0F0F; }}"
    return f"{{ .reg .b32 x; shr.b32 x, $1, {16 * j}; {_lookup('x', _E4M3_TABLES)} }}"


@gluon.constexpr_function
def _f16x2(v):
    """A 32-bit PTX immediate holding the fp16 value ``v`` (exact) in both halves."""
    import struct

    h = struct.unpack("<H", struct.pack("<e", v))[0]
    return f"{h << 16 | h:#010x}"


@gluon.constexpr_function
def _act_asm(K8, INT8, j):
    """PTX: MMA A elements from int64 activation words ($1), step ``j``."""
    if K8:
        pick = ("prmt.b32 $0, lo, hi, 0x6420;", "prmt.b32 $0, lo, hi, 0x7531;") if INT8 else \
            ("mov.b32 $0, lo;", "mov.b32 $0, hi;")
        return f"{{ .reg .b32 lo, hi; mov.b64 {{lo, hi}}, $1; {pick[j]} }}"
    sel = 0x7440 + 0x101 * j  # bytes j, j + 4 to the low bytes of each half
    if INT8:
        return (f"{{ .reg .b32 lo, hi, x, c; mov.b64 {{lo, hi}}, $1; prmt.b32 x, lo, hi, {sel:#x};"
                " and.b32 x, x, 0x00FF00FF; xor.b32 x, x, 0x00800080; or.b32 x, x, 0x64006400;"
                " mov.b32 c, 0x64806480; sub.rn.f16x2 $0, x, c; }")
    return (f"{{ .reg .b32 lo, hi, x; .reg .b16 p; mov.b64 {{lo, hi}}, $1; prmt.b32 x, lo, hi, {0x40 + 0x11 * j:#x};"
            " cvt.u16.u32 p, x; cvt.rn.f16x2.e4m3x2 $0, p; }")


@gluon.constexpr_function
def _regs(pack, inputs, kind):
    """The asm constraints of one 32-bit result from ``inputs`` inputs of ``pack`` elements each."""
    return "=r" + f",{kind}" * (pack * inputs)


@gluon.jit
def _operands(a, w, hb, j: gl.constexpr, K8: gl.constexpr, INT8: gl.constexpr, BITS: gl.constexpr):
    """Step j's A and B operands from the activation words ``a`` and the weight words ``w`` of one half-group, and
    ``hb`` the words' fifth-bit bytes as int32 (int5; int4 passes ``w``, unread)."""
    if K8:  # four 8-bit elements per register
        el: gl.constexpr = gl.int8 if INT8 else gl.float8e4nv
        A = gl.inline_asm_elementwise(_act_asm(K8, INT8, j), _regs(4, 1, "l"), [a], dtype=gl.int8, is_pure=True,
                                      pack=4)
        B = gl.inline_asm_elementwise(_code_asm(K8, INT8, j, BITS), _regs(4, 2, "r"), [w, hb], dtype=gl.int8,
                                      is_pure=True, pack=4)
        A = A.to(el, bitcast=True)
        B = B.to(el, bitcast=True)
    else:  # two fp16 elements per register
        A = gl.inline_asm_elementwise(_act_asm(K8, INT8, j), _regs(2, 1, "l"), [a], dtype=gl.float16, is_pure=True,
                                      pack=2)
        B = gl.inline_asm_elementwise(_code_asm(K8, INT8, j, BITS), _regs(2, 2, "r"), [w, hb], dtype=gl.float16,
                                      is_pure=True, pack=2)
    return A, B


@gluon.jit
def _fragments(w_ptrs, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g, valid, GROUP_AS: gl.constexpr):
    """Everything group g's step reads, zeros if not valid: weight words (halves 0 / 1, B fragments), activation
    words (A fragments), the weights' scale / zero words, the activations' row sums and (GROUP_AS) scales."""
    w0 = gl.load(w_ptrs + g * 16 * N, mask=valid, other=0)
    w1 = gl.load(w_ptrs + (g * 16 + 8) * N, mask=valid, other=0)
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
def _rows_to_shared(x_ptr, part, m0, M, G, g_lo, g_hi, BM: gl.constexpr, GPS: gl.constexpr, NW: gl.constexpr):
    """The split's per-group row inputs ``x[part, m0:m0 + BM, g_lo:g_hi]`` (``[P, M, G]`` fp32, rows clamped) as a
    ``[GPS, BM]`` shared tile, loaded once: the loop then issues no global load (a TMA refill's proxy fence would
    wait for it)."""
    L: gl.constexpr = gl.BlockedLayout([1, max(BM // 32, 1)], [max(32 // BM, 1), min(BM, 32)], [NW, 1], [1, 0])
    gi = g_lo + gl.arange(0, GPS, layout=gl.SliceLayout(1, L))
    mi = gl.minimum(m0 + gl.arange(0, BM, layout=gl.SliceLayout(0, L)), M - 1)
    x = gl.load(x_ptr + (part * M + mi)[None, :] * G + gi[:, None], mask=(gi < g_hi)[:, None], other=0.0)
    x_s = gl.allocate_shared_memory(gl.float32, [GPS, BM], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]), x)
    return x_s._reinterpret(gl.float32, [GPS, BM], gl.SwizzledSharedLayout(1, 1, 1, [0]))  # indexable by group


@gluon.jit
def _tiles_to_shared(descs, ring, st, g, a_row, n0, N, pred, BITS: gl.constexpr):
    """TMA group g's weight words ``[BN / 64, 16, 2, 32]`` (int5: and their fifth-bit bytes ``[16, BN]``), activation
    words ``[16 rows, 16]`` (int64; rows from the partition's first: those past M are not stored) and scale / zero words
    ``[BN]`` (``sz`` flat: a partial last tile reads the next group's head, columns that are not stored) into stage
    ``st``."""
    wq_desc, a_desc, sz_desc, wh_desc = descs
    bars = ring[3]
    nbytes: gl.constexpr = wq_desc.block_type.nbytes + a_desc.block_type.nbytes + sz_desc.block_type.nbytes + \
        (wh_desc.block_type.nbytes if BITS == 5 else 0)
    mbarrier.expect(bars.index(st), nbytes, pred=pred)
    tma.async_copy_global_to_shared(wq_desc, [n0 // 64, g * 16, 0, 0], bars.index(st), ring[0].index(st), pred=pred)
    tma.async_copy_global_to_shared(a_desc, [a_row, g * 16], bars.index(st), ring[1].index(st), pred=pred)
    tma.async_copy_global_to_shared(sz_desc, [g * N + n0], bars.index(st), ring[2].index(st), pred=pred)
    if BITS == 5:
        tma.async_copy_global_to_shared(wh_desc, [g * 16, n0], bars.index(st), ring[4].index(st), pred=pred)


@gluon.constexpr_function
def _transposed(ll):
    """The linear layout ``ll`` of a 2-D tensor with its two dims swapped."""
    sw = lambda bases: [[b[1], b[0]] for b in bases]  # noqa: E731
    return gl.DistributedLinearLayout(sw(ll.reg_bases), sw(ll.lane_bases), sw(ll.warp_bases), sw(ll.block_bases),
                                      [ll.shape[1], ll.shape[0]])


@gluon.constexpr_function
def _in_column_blocks(ll, cols):
    """The linear layout ``ll`` of a 2-D word tensor (columns on dim ``cols``) as the layout of the same words held
    as ``[columns / 64, word rows, 2, 32]`` (column c = 64 b1 + 32 b0 + c % 32): the weight stage's column blocks."""
    split = lambda bases: [[b[cols] >> 6, b[1 - cols], b[cols] >> 5 & 1, b[cols] & 31] for b in bases]  # noqa: E731
    return gl.DistributedLinearLayout(split(ll.reg_bases), split(ll.lane_bases), split(ll.warp_bases),
                                      split(ll.block_bases), [ll.shape[cols] // 64, ll.shape[1 - cols], 2, 32])


@gluon.jit
def _staged(x_st, h: gl.constexpr, L: gl.constexpr, KW: gl.constexpr, OP: gl.constexpr, T: gl.constexpr = False,
            BLOCKS: gl.constexpr = False):
    """Half h's fragment words (operand OP: 0 = A ``[rows, 8 KW]``, 1 = B ``[8 KW, cols]``; slot s: word ``s // KW``
    of the half) from a stage of words — the activations' ``[rows, 16]`` for A and the weights' ``[16, cols]`` for B,
    or with T (swap-AB) the other stage, read transposed: each thread loads its two words per row / column once (the
    k-width-1 fragment: words t, t + 4) and names each KW times (joins), a register-only relabelling onto ``L``. T
    permutes registers, not the shared tile: a permuted unswizzled NVMMA tile reads as if its rows were contiguous
    (Triton 3.6 / 3.7). BLOCKS: the weight words staged as 128-byte swizzled rows ``[cols / 64, 16, 2, 32]`` (row
    ``(b1, k, b0)``: the swizzle phase of word row k is 2k + b0): a fragment read's 32 lanes (8 columns x 4 word rows)
    hit 32 banks; unswizzled ``[16, cols]`` rows (pitch a multiple of 32 words) put the 4 lanes of a column on one bank
    (H200 ncu, call 117: 63 % of the shared wavefronts excessive)."""
    L1: gl.constexpr = gl.DotOperandLayout(operand_index=OP, parent=L.parent, k_width=1)
    if BLOCKS:  # load the half's [cols / 64, 8, 2, 32] words so, then relabel them to [cols, 8] / [8, cols]
        xs = x_st.slice(8 * h, 8, dim=1)
        frag: gl.constexpr = [64 * xs.shape[0], 8] if T else [8, 64 * xs.shape[0]]
        x = xs.load(_in_column_blocks(gl.to_linear_layout(L1, frag), 0 if T else 1))
        x = gl.reshape(gl.permute(x, (0, 2, 3, 1) if T else (1, 0, 2, 3)), frag)
    elif T:  # the words' axis is the stage's other one: load in L1 transposed, then swap the register labels
        xs = x_st.slice(8 * h, 8, dim=OP)
        x = gl.permute(xs.load(_transposed(gl.to_linear_layout(L1, [xs.shape[1], xs.shape[0]]))), (1, 0))
    else:
        x = x_st.slice(8 * h, 8, dim=1 - OP).load(L1)
    x = gl.join(x, x)
    if KW == 4:
        x = gl.join(x, x)
    if OP == 0:
        x = gl.reshape(x, [x.shape[0], 8 * KW])
    else:
        x = gl.reshape(gl.permute(gl.reshape(x, [8, x.shape[1], KW]), (0, 2, 1)), [8 * KW, x.shape[1]])
    return gl.convert_layout(x, L, assert_trivial=True)


@gluon.constexpr_function
def _in_halfword_blocks(ll, BN):
    """The linear layout ``ll`` of the weights' 8-bit wgmma operand ``[BN, 128]`` (its first two register bases: k
    bits 0 and 1, a register's four codes), those two bases dropped, as the layout of the weight stage read as
    halfwords ``[BN / 64, 16, 2, 64]`` (halfword ``2 c + i`` of row ``(b1, r, b0)``: nibbles ``4 i .. 4 i + 3`` of
    word row r — the codes ``k = 8 r + 4 i ..`` — of column ``64 b1 + 32 b0 + c``)."""
    if [list(b) for b in ll.reg_bases[:2]] != [[0, 1], [0, 2]]:
        raise ValueError(f"mma2 wg: the operand's registers do not hold four consecutive codes: {ll}")

    def split(bases):
        return [[n >> 6, k >> 3, n >> 5 & 1, (n & 31) << 1 | k >> 2 & 1] for n, k in bases]
    return gl.DistributedLinearLayout(split(ll.reg_bases[2:]), split(ll.lane_bases), split(ll.warp_bases),
                                      split(ll.block_bases), [BN // 64, 16, 2, 64])


@gluon.constexpr_function
def _wg_code_asm(INT8):
    """PTX: the wgmma form's four codes of a register from their halfword ($1, as int32; the pack's other inputs
    repeat it)."""
    return _lookup("$1", _INT8_TABLES if INT8 else _E4M3_TABLES)


@gluon.jit
def _wg_weights(w_st, LA: gl.constexpr, INT8: gl.constexpr):
    """A group's weights as the wgmma's A operand ``[BN, 128]`` in registers (layout LA, k-width 4), from a stage of
    words ``[BN / 64, 16, 2, 32]``: each thread reads the halfword holding each register's four codes (the two
    threads of a word read its halves), then one ``prmt`` lookup makes the register (:func:`_lookup`, codes ``c = q``)
    — the register-only relabelling onto LA as :func:`_staged`'s."""
    BN: gl.constexpr = w_st.shape[0] * 64
    half = w_st._reinterpret(gl.int16, [BN // 64, 16, 2, 64], gl.NVMMASharedLayout(
        swizzle_byte_width=w_st.layout.swizzle_byte_width, element_bitwidth=16, rank=4))
    x = half.load(_in_halfword_blocks(gl.to_linear_layout(LA, [BN, 128]), BN))
    x = gl.reshape(gl.permute(gl.reshape(x, [BN // 64, 16, 2, 32, 2]), (0, 2, 3, 1, 4)), [BN, 32]).to(gl.int32)
    x = gl.convert_layout(gl.reshape(gl.join(gl.join(x, x), gl.join(x, x)), [BN, 128]), LA, assert_trivial=True)
    c = gl.inline_asm_elementwise(_wg_code_asm(INT8), _regs(4, 1, "r"), [x], dtype=gl.int8, is_pure=True, pack=4)
    return c if INT8 else c.to(gl.float8e4nv, bitcast=True)


@gluon.jit
def _wg_tokens(a_st, INT8: gl.constexpr):
    """A stage's activation words ``[BM, 16]`` (int64, 128-byte rows) as the wgmma's B operand ``[128, BM]``: the
    same bytes as 8-bit codes, K-major."""
    BM: gl.constexpr = a_st.shape[0]
    el: gl.constexpr = gl.int8 if INT8 else gl.float8e4nv
    codes = a_st._reinterpret(el, [BM, 128], gl.NVMMASharedLayout(
        swizzle_byte_width=a_st.layout.swizzle_byte_width, element_bitwidth=8, rank=2))
    return codes.permute((1, 0))


@gluon.jit
def _along(v, SWAP: gl.constexpr, TOKENS: gl.constexpr):
    """A token (TOKENS) or column vector broadcast along the tile frame: tokens are its rows, columns its columns;
    SWAP (the frame transposed) the other way round."""
    if SWAP == TOKENS:
        out = v[None, :]
    else:
        out = v[:, None]
    return out


@gluon.jit
def _w4a8_mma2_kernel(
    a_ptr, as_ptr, rs_ptr, wq_ptr, wh_ptr, sz_ptr, ws_ptr, out_ptr, cnt_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    BITS: gl.constexpr, INT8: gl.constexpr, GROUP_AS: gl.constexpr, SPLIT: gl.constexpr, RW: gl.constexpr,
    HW: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, PF: gl.constexpr = 0,
    K8: gl.constexpr = False, STAGES: gl.constexpr = 0, GPS: gl.constexpr = 1, ABLATE: gl.constexpr = 0,
    SWAP: gl.constexpr = False, TRIGGER: gl.constexpr = False, WAIT: gl.constexpr = False, WG: gl.constexpr = False,
):
    if WAIT:  # launched as a programmatic dependent: the previous grid complete and its writes visible from here on
        gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    NW: gl.constexpr = gl.num_warps()
    KW: gl.constexpr = 4 if K8 else 2  # a thread's consecutive k per register
    SLOTS: gl.constexpr = 8 * KW  # the MMA's k
    # SWAP (a ring): the tile is [BN, 8 tokens] — the weights on the MMA's 16 rows, warps down them; WG: [BN, BM]
    # on wgmma, a warpgroup per 64 rows
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 32]) \
        if WG else gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NW, 1] if SWAP else [1, NW],
                                             instr_shape=[16, 8])
    LA: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=KW)
    LB: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=KW)
    TOK: gl.constexpr = gl.SliceLayout(0 if SWAP else 1, MMA)  # a vector along the tokens
    COL: gl.constexpr = gl.SliceLayout(1 if SWAP else 0, MMA)  # a vector along the columns
    gl.static_assert((BITS == 4 or BITS == 5 and STAGES > 0 and (INT8 or not K8)) and BK == 128,
                     "int5: from the ring, fp16 operands or int8 x int8")
    gl.static_assert(BM == 8 if SWAP and not WG else BM == 16 or BM == 32 or BM == 64 or WG and BM == 8,
                     "token tiles: 8 (swap-AB), 16, 32, 64 (wg: 8 too)")
    gl.static_assert(not WG or SWAP and K8 and STAGES > 0 and BITS == 4 and ABLATE == 0 and BN == 16 * NW and
                     NW % 4 == 0, "wg: swap-AB, 8-bit operands from the ring, int4, 64 weight rows per warpgroup")
    gl.static_assert(STAGES > 0 or not SWAP, "swap-AB reads its operands from the ring")
    MT = (M + BM - 1) // BM  # token tiles per column tile: adjacent programs of the same columns
    m0 = gl.program_id(0) % MT * BM
    n0 = gl.program_id(0) // MT * BN
    part = (n0 >= b1).to(gl.int32) + (n0 >= b2).to(gl.int32)
    G = K // BK
    g_lo = gl.program_id(1) * groups_per_split
    g_hi = gl.minimum(g_lo + groups_per_split, G)
    if STAGES:  # a_ptr, wq_ptr, sz_ptr (int5: wh_ptr): TMA descriptors; group g_lo + i in stage i
        descs = (wq_ptr, a_ptr, sz_ptr, wh_ptr)
        w_s = gl.allocate_shared_memory(gl.int32, [STAGES, BN // 64, 16, 2, 32], wq_ptr.layout)  # column blocks
        a_s = gl.allocate_shared_memory(gl.int64, [STAGES, BM, 16], a_ptr.layout)
        s_s = gl.allocate_shared_memory(gl.int32, [STAGES, BN], sz_ptr.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        if BITS == 5:
            ring = (w_s, a_s, s_s, bars, gl.allocate_shared_memory(gl.uint8, [STAGES, 16, BN], wh_ptr.layout))
        else:
            ring = (w_s, a_s, s_s, bars)
        for i in gl.static_range(STAGES):
            mbarrier.init(ring[3].index(i), count=1)
        for i in gl.static_range(STAGES):
            _tiles_to_shared(descs, ring, i, g_lo + i, part * M + m0, n0, N, g_lo + i < g_hi, BITS)
        rs_s = _rows_to_shared(rs_ptr, part, m0, M, G, g_lo, g_hi, BM, GPS, NW)
        as_s = _rows_to_shared(as_ptr, part, m0, M, G, g_lo, g_hi, BM, GPS, NW) if GROUP_AS else rs_s
        _barrier()
    else:  # B fragments: words [SLOTS, BN]; slot s of a half-group: word row (s % 4KW) // KW + 4 (s // 4KW)
        sb = gl.arange(0, SLOTS, layout=gl.SliceLayout(1, LB))
        nb = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, LB))
        w_ptrs = wq_ptr + ((sb % (4 * KW)) // KW + 4 * (sb // (4 * KW)))[:, None] * N + \
            gl.minimum(nb, N - 1)[None, :]
        # A fragments: activation words [16 tokens, SLOTS] (slots to word rows as B's), rows clamped
        ma = gl.arange(0, BM, layout=gl.SliceLayout(1, LA))
        sa = gl.arange(0, SLOTS, layout=gl.SliceLayout(0, LA))
        a64 = a_ptr.to(gl.pointer_type(gl.int64)) + part.to(gl.int64) * M * (K // 8)
        a_ptrs = a64 + (gl.minimum(m0 + ma, M - 1).to(gl.int64) * (K // 8))[:, None] + \
            ((sa % (4 * KW)) // KW + 4 * (sa // (4 * KW)))[None, :]
    # accumulator frame
    mo = m0 + gl.arange(0, BM, layout=TOK)
    no = n0 + gl.arange(0, BN, layout=COL)
    mask_m = mo < M
    mask_n = no < N
    rows = gl.minimum(mo, M - 1)
    if GROUP_AS:
        as_rows = as_ptr + part * M * G + rows * G
    else:
        as_rows = as_ptr + part * M + rows
    rs_rows = rs_ptr + part * M * G + rows * G
    ZO: gl.constexpr = (1 << (BITS - 1)) if K8 else 0  # z - o = d + ZO (sz's high half is d = z - 2^(b-1))
    FRAME: gl.constexpr = [BN, BM] if SWAP else [BM, BN]
    acc = gl.zeros(FRAME, gl.float32, MMA)
    if not STAGES:
        sz_ptrs = sz_ptr + no
        if PF >= 1:  # group g + PF's loads are issued before group g's MMAs
            f = _fragments(w_ptrs, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g_lo, g_lo < g_hi, GROUP_AS)
        if PF == 2:
            fb = _fragments(w_ptrs, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g_lo + 1, g_lo + 1 < g_hi,
                            GROUP_AS)
    for g in range(g_lo, g_hi):
        if STAGES:
            rel = g - g_lo
            rs = rs_s.index(rel).load(TOK)
            ag = as_s.index(rel).load(TOK)
            st = rel % STAGES
            mbarrier.wait(ring[3].index(st), (rel // STAGES) & 1)
            if ABLATE == 4:  # bench only (wrong results): the ring alone, no fragment read
                sz = gl.zeros([BN], gl.int32, COL) + rel
            elif WG:  # the group sums on wgmma before the stage is refilled: it reads the activations there
                sz = ring[2].index(st).load(COL)
                t = gl.zeros(FRAME, gl.int32 if INT8 else gl.float32, MMA)
                t = warpgroup_mma(_wg_weights(ring[0].index(st), LA, INT8), _wg_tokens(ring[1].index(st), INT8), t,
                                  use_acc=False, is_async=True)
                t = warpgroup_mma_wait(num_outstanding=0, deps=(t,))
            else:  # SWAP: the stages read transposed, the weights as the A operand and the activations as B
                w0 = _staged(ring[0].index(st), 0, LA if SWAP else LB, KW, 0 if SWAP else 1, SWAP, True)
                w1 = _staged(ring[0].index(st), 1, LA if SWAP else LB, KW, 0 if SWAP else 1, SWAP, True)
                a0 = _staged(ring[1].index(st), 0, LB if SWAP else LA, KW, 1 if SWAP else 0, SWAP)
                a1 = _staged(ring[1].index(st), 1, LB if SWAP else LA, KW, 1 if SWAP else 0, SWAP)
                sz = ring[2].index(st).load(COL)
                if BITS == 5:
                    h0 = _staged(ring[4].index(st), 0, LA if SWAP else LB, KW, 0 if SWAP else 1, SWAP).to(gl.int32)
                    h1 = _staged(ring[4].index(st), 1, LA if SWAP else LB, KW, 0 if SWAP else 1, SWAP).to(gl.int32)
            _barrier()  # every warp holds stage st's words: TMA refills it with group g + STAGES
            _tiles_to_shared(descs, ring, st, g + STAGES, part * M + m0, n0, N, g + STAGES < g_hi, BITS)
        else:
            if PF == 0:
                f = _fragments(w_ptrs, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g, g < g_hi, GROUP_AS)
            else:
                fn = _fragments(w_ptrs, a_ptrs, sz_ptrs, mask_n, rs_rows, as_rows, N, g + PF, g + PF < g_hi, GROUP_AS)
            w0, w1, a0, a1, sz, rs, ag = f
        if ABLATE == 4:
            acc += (_along(sz, SWAP, False) + _along(rs, SWAP, True)).to(gl.float32)
        elif ABLATE == 1:  # bench only (wrong results): the words consumed, no operands, MMAs or fold
            wsum = gl.convert_layout(gl.sum(w0 ^ w1, axis=0), gl.SliceLayout(0, MMA)) + sz
            asum = gl.convert_layout(gl.sum((a0 ^ a1).to(gl.int32), axis=1), gl.SliceLayout(1, MMA))
            acc += (wsum[None, :] + asum[:, None]).to(gl.float32) + (rs + ag)[:, None]
        else:
            if not WG:
                t = gl.zeros(FRAME, gl.int32 if K8 and INT8 else gl.float32, MMA)
                if BITS == 4:  # no fifth bits
                    h0 = w0
                    h1 = w1
                for j in gl.static_range(4 // (KW // 2)):
                    A, B = _operands(a0, w0, h0, j, K8, INT8, BITS)
                    t = mma_v2(B, A, t) if SWAP else mma_v2(A, B, t)
                for j in gl.static_range(4 // (KW // 2)):
                    A, B = _operands(a1, w1, h1, j, K8, INT8, BITS)
                    t = mma_v2(B, A, t) if SWAP else mma_v2(A, B, t)
            if ABLATE == 3:  # bench only (wrong results): no scale fold
                acc += t.to(gl.float32)
            else:
                s = (sz & 0xFFFF).to(gl.uint16).to(gl.float16, bitcast=True).to(gl.float32)
                sd = s * ((sz >> 16) + ZO).to(gl.float32)
                contrib = t.to(gl.float32) * _along(s, SWAP, False) - \
                    _along(rs, SWAP, True) * _along(sd, SWAP, False)
                if GROUP_AS:
                    acc += _along(ag, SWAP, True) * contrib
                else:
                    acc += contrib
        if PF == 1:
            f = fn
        elif PF == 2:
            f = fb
            fb = fn
    if TRIGGER:  # the next launch (a programmatic dependent: the next producer) may start; it waits for this grid
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                                  pack=1)
    if STAGES:
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ring[3].index(i))
    if not GROUP_AS:
        acc *= _along(gl.load(as_rows), SWAP, True)
    mask = _along(mask_m, SWAP, True) & _along(mask_n, SWAP, False)
    out = out_ptr + _along(mo, SWAP, True) * stride_om + _along(no, SWAP, False)
    if SPLIT == 0:
        gl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    elif SPLIT == 1:  # the partials are the output ``[S, M, N]``, summed by the host or the consumer
        part_ptrs = ws_ptr + _along(mo, SWAP, True) * N + _along(no, SWAP, False)
        gl.store(part_ptrs + gl.program_id(1).to(gl.int64) * M * N, acc, mask=mask)
    else:  # tile-local partials ``[tiles, S, BM, BN]``, summed by the tile's last program
        tile = ws_ptr + gl.program_id(0).to(gl.int64) * gl.num_programs(1) * (BM * BN)
        local = _along(mo - m0, SWAP, True) * BN + _along(no - n0, SWAP, False)
        gl.store(tile + gl.program_id(1) * (BM * BN) + local, acc)
        _reduce_partials(tile, out_ptr, cnt_ptr, m0, n0, M, N, stride_om, BM, BN, RW)


@gluon.jit
def _reduce_partials(tile, out_ptr, cnt_ptr, m0, n0, M, N, stride_om, BM: gl.constexpr, BN: gl.constexpr,
                     RW: gl.constexpr):
    """The tile's split arrival: the last program of the tile (``cnt``) sums its ``S`` partials, ``[BM, BN]`` each
    from ``tile`` on, in split order from zero, stores the sum as ``out``'s rows (bf16 or fp32) and resets the counter.
    It reads them in a layout of its own, whatever the MMA frame: 16-byte vectors along the columns at offsets fixed
    by the tile (one address per partial), ``RW`` partials of a ``[rows, BN]`` chunk per L2 round trip
    (:func:`.triton.reduce_rows`)."""
    NW: gl.constexpr = gl.num_warps()
    S = gl.num_programs(1)
    _barrier()  # every thread's partial is written before the release below
    if gl.atomic_add(cnt_ptr + gl.program_id(0), 1, sem="acq_rel", scope="gpu") == S - 1:
        RED: gl.constexpr = gl.BlockedLayout([1, 4], [128 // BN, BN // 4], [NW, 1], [1, 0])
        RCH: gl.constexpr = reduce_rows(BM, BN, RW, NW)
        r = gl.arange(0, RCH, layout=gl.SliceLayout(1, RED))
        c = gl.arange(0, BN, layout=gl.SliceLayout(0, RED))
        for r0 in gl.static_range(0, BM, RCH):
            chunk = tile + (r0 + r)[:, None] * BN + c[None, :]
            total = gl.zeros([RCH, BN], gl.float32, RED)
            for i0 in range(0, S, RW):  # RW partials per L2 round trip, added in split order
                for j in gl.static_range(RW):
                    p = gl.load(chunk + gl.minimum(i0 + j, S - 1) * (BM * BN), cache_modifier=".cg")
                    total = gl.where(i0 + j < S, total + p, total)
            rows = m0 + r0 + r
            cols = n0 + c
            gl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], total.to(out_ptr.dtype.element_ty),
                     mask=(rows < M)[:, None] & (cols < N)[None, :])
        gl.store(cnt_ptr + gl.program_id(0), 0)  # every arrival is in: the counter is free for the next launch


def ring_descriptors(a: torch.Tensor, wq: torch.Tensor, sz: torch.Tensor, BN: int, BM: int = 16,
                     wh: torch.Tensor | None = None) -> tuple[TensorDescriptor, ...]:
    """The ``STAGES`` kernel's TMA descriptors: the activations ``a [P, M, K]`` as int64 words ``[P M, K/8]`` in
    ``[BM, 16]`` tiles (128-byte swizzle: a warp's fragment reads hit distinct banks), ``wq [K/8, N]`` words in
    ``[16, BN]`` tiles landing as ``[BN/64, 16, 2, 32]`` (a 4-D view whose strides are not in order — TMA takes them
    so —, 128-byte swizzle; N a multiple of 64), ``sz [G, N]`` words flat in ``[BN]`` tiles (unswizzled), and int5's
    fifth-bit bytes ``wh [K/8, N]`` in ``[16, BN]`` tiles (unswizzled; None for int4)."""
    P, M, K = a.shape
    words = a.reshape(P * M, K).view(torch.int64)
    K8, N = wq.shape
    if N % 64:
        raise ValueError(f"w4a8_gemm config: the mma2 ring stages weights in 64-column blocks, N={N} is not a multiple")
    blocks = wq.view(K8, N // 64, 2, 32).permute(1, 0, 2, 3)  # [N/64, K/8, 2, 32], strides [64, N, 32, 1]
    return (tma_tiles.descriptor(words, [BM, 16], gl.int64),
            tma_tiles.descriptor(blocks, [BN // 64, 16, 2, 32], gl.int32),
            tma_tiles.descriptor(sz.view(-1), [BN], gl.int32, False),
            None if wh is None else tma_tiles.descriptor(wh, [16, BN], gl.uint8, False))
