"""Call 90's form of :func:`radiance_kernels.tl.l2.prefetch_regions` (every program issues its slice of every range),
for ``probe_l2.py`` with ``L2_SLICED=1`` (an A/B against the round-robin form; not used by the kernels)."""

import triton
import triton.language as tl

from radiance_kernels.tl.l2 import PREFETCH_L2


@triton.jit
def prefetch_regions_sliced(regions, count, NREG: tl.constexpr, LANES: tl.constexpr):
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
