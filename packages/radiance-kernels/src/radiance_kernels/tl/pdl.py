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
