"""Programmatic dependent launch (``griddepcontrol``, sm_90+) as a Triton device function.

A launch made with ``launch_pdl=True`` may be scheduled while the launch before it still runs; its programs call
:func:`programmatic_start` before touching memory (:func:`radiance_kernels.backends.programmatic_launch_on` says
whether the host launches that way).
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
