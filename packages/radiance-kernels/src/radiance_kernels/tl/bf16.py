"""fp32 → bf16 round-to-nearest-even as a Triton device function.

The interpreter's fp32→bf16 cast truncates; ``SOFT=True`` rounds in integer ops instead (the bits of
``x`` plus ``0x7FFF`` plus the kept lsb, shifted down 16; NaN → canonical NaN). ``SOFT=False`` is the
hardware convert (RNE on NVIDIA and AMD).
"""

import triton
import triton.language as tl


@triton.jit
def to_bf16(x, SOFT: tl.constexpr):
    if SOFT:
        b = x.to(tl.float32).to(tl.uint32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        r = tl.where(x == x, r, 0x7FC0)
        return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(tl.bfloat16)
