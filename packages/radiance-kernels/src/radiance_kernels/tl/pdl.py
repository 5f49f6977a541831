"""Programmatic dependent launch (``griddepcontrol``, sm_90+) as Triton device functions.

A launch made with ``launch_pdl=True`` may be scheduled while the launch before it still runs; its programs call
:func:`programmatic_start` before touching memory the launches before it write (:func:`radiance_kernels.backends.
programmatic_launch_on` says whether the host launches that way); before it they may only read constants, or
:func:`prefetch_l2` them.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def programmatic_start(WAIT: tl.constexpr, TRIGGER: tl.constexpr = False):
    """TRIGGER: let the next launch (a programmatic dependent) start now; WAIT (launched as one): wait for the
    previous launch's grid, complete and its writes visible, before reading or writing anything."""
    if TRIGGER:
        gdc_launch_dependents()
    if WAIT:
        gdc_wait()


@triton.jit
def prefetch_l2(ptrs):
    """``prefetch.global.L2`` of every address in ``ptrs``: constants a programmatic dependent will read after its
    wait, brought from DRAM while the launch before it runs (a hint: nothing is read into registers). NVIDIA PTX, so
    only where programmatic launch runs."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_ranges(plan_ptr, n, pid, nprog, NT: tl.constexpr):
    """``cp.async.bulk.prefetch.L2`` (sm_90) of the ``n`` byte ranges of ``plan`` — int64 ``[2, n]``: start
    addresses, then sizes (16-byte aligned multiples of 16) —, range ``e`` issued by program ``e % nprog`` (one lane
    each, ``NT`` lanes a program): a consumer's first weight tiles pulled into the L2 while DRAM has nothing else to
    do. A hint (nothing is read into registers); NVIDIA PTX, so only where programmatic launch runs."""
    for base in range(0, n, nprog * NT):
        e = base + pid + nprog * tl.arange(0, NT)
        live = e < n
        start = tl.load(plan_ptr + e, mask=live, other=0)
        size = tl.load(plan_ptr + n + e, mask=live, other=0).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [start, size], dtype=tl.int32, is_pure=False, pack=1)
