"""e4m3 encode/decode as Triton device functions: the integer algorithm of
:mod:`radiance_kernels.formats.e4m3`, so kernels are bit-identical to the reference (and correct under
the interpreter, whose fp32→fp8 cast is wrong). ``HW`` selects the hardware convert on GPUs; the two are
gated equal on the device."""

import triton
import triton.language as tl


@triton.jit
def e4m3_encode_sw(x):
    """float32 → int32 code in [0, 255] (RNE, saturating, NaN → 0, zero → +0)."""
    bits = x.to(tl.float32).to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    a = bits & 0x7FFFFFFF
    eb = a >> 23
    normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - (120 << 3)
    big = (a & 0x7FFFFF) | 0x800000
    s = tl.minimum(tl.maximum(141 - eb, 1), 25)
    sub = (big + ((1 << (s - 1)) - 1) + ((big >> s) & 1)) >> s
    code = tl.where(eb >= 121, normal, sub)
    code = tl.where(a >= 0x43E00000, 0x7E, code)
    code = tl.where(a > 0x7F800000, 0, code)
    code = tl.where(code == 0, code, code | (sign << 7))
    return code


@triton.jit
def e4m3_encode_hw(x):
    """Hardware convert wrapped by the codec's rules; equal to :func:`e4m3_encode_sw` on GPUs."""
    x = x.to(tl.float32)
    x = tl.where(x != x, 0.0, x)
    x = tl.minimum(tl.maximum(x, -448.0), 448.0)
    code = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)
    return tl.where(code == 0x80, 0, code)


@triton.jit
def e4m3_encode(x, HW: tl.constexpr):
    if HW:
        return e4m3_encode_hw(x)
    else:
        return e4m3_encode_sw(x)


@triton.jit
def e4m3_decode(code):
    """int32 code → float32 (NaN codes never reach kernels: the encoder does not emit them)."""
    c = code.to(tl.int32)
    e = (c >> 3) & 0xF
    m = (c & 7).to(tl.float32)
    scale = ((e + 120) << 23).to(tl.float32, bitcast=True)  # 2^(e-7)
    mag = tl.where(e == 0, m * 0.001953125, (1.0 + m * 0.125) * scale)
    return tl.where(c >= 0x80, -mag, mag)
