"""L2 prefetch hints for Triton device code (NVIDIA sm_90+: ``cp.async.bulk.prefetch.L2``).

A launch that runs before a weight-streaming kernel, and moves few bytes itself (a decode producer), can start that
kernel's weight stream: its lanes ask the copy engine to bring byte ranges into L2 and go on (nothing comes into
registers, nothing is waited for). A hint: correctness never depends on it.

A prefetch plan is a tuple of regions ``(ptr, stride, length, total)`` — ``ptr`` a uint8 view of a tensor of
``total`` bytes — sharing one ``count``: region r covers bytes ``[j·stride, j·stride + length)`` of its tensor for
``j < count`` (clipped to ``total``; ``ptr`` and ``stride`` 16-byte aligned, a tail under 16 bytes dropped).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: PTX: prefetch ``$2`` bytes at ``$1`` into L2 unless ``$2`` is 0 (16-byte multiples; a hint).
PREFETCH_L2: tl.constexpr = tl.constexpr(
    "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.b32 $0, 0; }")


@triton.jit
def prefetch_regions(regions, count, NREG: tl.constexpr, LANES: tl.constexpr, SLICE: tl.constexpr = 32768):
    """This program's share of the plan ``regions`` (``NREG`` of them, ``count`` ranges each): every range is cut
    into ``SLICE``-byte slices, dealt round-robin over the launch's programs (any grid shape, ``LANES`` threads
    each); a program issues one bulk prefetch per slice it holds, from its first thread. The cost is per instruction
    and per program, not per byte: H200 call 88 (a slice per thread, ~500 per one-warp program) doubled the linear's
    time, call 90 (every range by every program, 16-26 per program) still cost the producers whose start lies on
    the critical path up to 1 us."""
    prog = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    progs = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
    first = tl.arange(0, LANES) == 0
    for r in tl.static_range(NREG):
        ptr, stride, length, total = regions[r]
        per = (length + SLICE - 1) // SLICE
        for i in range(prog, per * count, progs):
            s = (i % per).to(tl.int64) * SLICE
            start = (i // per).to(tl.int64) * stride + s
            n = (tl.maximum(tl.minimum(tl.minimum(length - s, total - start), SLICE), 0) & -16).to(tl.int32)
            tl.inline_asm_elementwise(PREFETCH_L2, "=r,l,r", [ptr + start + tl.zeros([LANES], tl.int64),
                                                              tl.where(first, n, 0)],
                                      dtype=tl.int32, is_pure=False, pack=1)
