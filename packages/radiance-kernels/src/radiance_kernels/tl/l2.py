"""L2 prefetch hints for Triton device code (NVIDIA sm_90+: ``cp.async.bulk.prefetch.L2``).

A launch that runs before a weight-streaming kernel, and moves few bytes itself (a decode producer), can start that
kernel's weight stream: its lanes ask the copy engine to bring byte ranges into L2 and go on (nothing comes into
registers, nothing is waited for). A hint: correctness never depends on it.

A prefetch plan is a tuple of regions ``(ptr, stride, length, total)`` — ``ptr`` a uint8 view of a tensor of
``total`` bytes — sharing one ``count``: region r covers bytes ``[j·stride, j·stride + length)`` of its tensor for
``j < count`` (clipped to ``total``). Every program of the launch takes an equal 16-byte-aligned slice of each range
(``ptr`` and ``stride`` 16-byte aligned; a slice's tail under 16 bytes is dropped).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: PTX: prefetch ``$2`` bytes at ``$1`` into L2 unless ``$2`` is 0 (16-byte multiples; a hint).
PREFETCH_L2: tl.constexpr = tl.constexpr(
    "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.b32 $0, 0; }")


@triton.jit
def prefetch_regions(regions, count, NREG: tl.constexpr, LANES: tl.constexpr):
    """This program's share of the plan ``regions`` (``NREG`` of them, ``count`` ranges each): each of the launch's
    programs (any grid shape, ``LANES`` threads) issues one bulk prefetch per range, from its first thread — the
    copy engine's cost is per instruction, not per byte (H200 call 88: one 16-byte-aligned slice per *thread* of
    the launch, ~500 instructions per one-warp program, doubled the linear's time)."""
    prog = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    progs = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    first = tl.arange(0, LANES) == 0
    for r in tl.static_range(NREG):
        ptr, stride, length, total = regions[r]
        chunk = ((length + progs - 1) // progs + 15) // 16 * 16
        off = prog.to(tl.int64) * chunk
        for j in range(count):
            start = j.to(tl.int64) * stride + off
            n = (tl.maximum(tl.minimum(tl.minimum(length - off, total - start), chunk), 0) & -16).to(tl.int32)
            n = tl.where(first, n, 0) + tl.zeros([LANES], tl.int32)
            tl.inline_asm_elementwise(PREFETCH_L2, "=r,l,r", [ptr + start + tl.zeros([LANES], tl.int64), n],
                                      dtype=tl.int32, is_pure=False, pack=1)
