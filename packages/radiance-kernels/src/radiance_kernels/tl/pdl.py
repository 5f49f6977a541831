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
def first_groups_chunk(e, q, per, splits, F, G, CH: tl.constexpr):
    """Chunk ``e`` of a weight region's first ``F`` groups of every split (``splits`` runs of ``per`` groups of ``q``
    bytes each, ``G`` groups in all; ``CH``-byte chunks, ``ceil(F q / CH)`` a split): (byte offset, size), size <= 0
    past the region. Split s covers groups ``[s per, min(s per + F, G))``."""
    q = q.to(tl.int64)
    nch = (F * q + CH - 1) // CH
    s = e // nch
    lo = s * per * q + e % nch * CH
    hi = tl.minimum(s * per + F, G) * q
    size = tl.where(e < splits * nch, tl.minimum(hi - lo, CH), 0)
    return lo, size


@triton.jit
def _prefetch_region(base, q, per, splits, F, G, pid, nprog, NT: tl.constexpr, CH: tl.constexpr):
    total = splits * ((F * q.to(tl.int64) + CH - 1) // CH)
    for e0 in range(0, total, nprog * NT):
        lo, size = first_groups_chunk(e0 + pid + nprog * tl.arange(0, NT).to(tl.int64), q, per, splits, F, G, CH)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [base.to(tl.pointer_type(tl.uint8)) + lo, size.to(tl.int32)], dtype=tl.int32, is_pure=False,
            pack=1)


@triton.jit
def prefetch_first_groups(r0, r1, r2, q0, q1, q2, per, splits, F, G, pid, nprog, REGIONS: tl.constexpr,
                          NT: tl.constexpr, CH: tl.constexpr = 65536):
    """``cp.async.bulk.prefetch.L2`` (sm_90) of what a split-K GEMM streams first: the first ``F`` groups of each
    of its ``splits`` K ranges (``per`` groups each) in ``REGIONS`` weight tensors ``r0..`` of ``q0..`` bytes a
    group (:func:`first_groups_chunk`), ``CH``-byte chunks dealt to the ``nprog`` programs' ``NT`` lanes in turn —
    a consumer's first weight tiles pulled into the L2 while DRAM has nothing else to do. A hint (nothing is read
    into registers); NVIDIA PTX, so only where programmatic launch runs."""
    _prefetch_region(r0, q0, per, splits, F, G, pid, nprog, NT, CH)
    _prefetch_region(r1, q1, per, splits, F, G, pid, nprog, NT, CH)
    if REGIONS == 3:
        _prefetch_region(r2, q2, per, splits, F, G, pid, nprog, NT, CH)
