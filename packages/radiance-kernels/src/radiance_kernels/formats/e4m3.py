"""OCP e4m3fn, as the W4A8 activations use it.

Encoding: round to nearest, ties to even; saturating at ±448 (also for ±inf); NaN → 0; a zero result
is always +0 (code 0x00, never 0x80). 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals are
m·2⁻⁹. Codes 0x7F/0xFF are NaN and are never produced by :func:`encode`.

The encoder is integer arithmetic on the float32 bit pattern, so the torch reference here and the
Triton helper in :mod:`radiance_kernels.tl.e4m3` compute the same function and the code-domain row sums
equal the sum of what the codes decode to by construction.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
CODE_MAX = 0x7E  # +448


def encode(x: torch.Tensor) -> torch.Tensor:
    """float32 (or anything castable) → uint8 e4m3 codes."""
    bits = x.to(torch.float32).contiguous().view(torch.int32)
    sign = (bits >> 31) & 1
    a = bits & 0x7FFFFFFF
    eb = a >> 23  # biased float32 exponent
    mant = a & 0x7FFFFF
    # normal e4m3 range: |x| >= 2^-6  (float32 biased exponent >= 121)
    r = mant >> 20
    rem = mant & 0xFFFFF
    up = (rem > 0x80000) | ((rem == 0x80000) & ((r & 1) == 1))
    normal = ((eb - 120) << 3) + r + up.to(torch.int32)
    # subnormal e4m3 range: value = M * 2^(eb-150) with M the 24-bit significand; units of 2^-9
    big = mant | 0x800000
    s = (141 - eb).clamp(min=1, max=25)
    q = big >> s
    srem = big & ((1 << s) - 1)
    half = 1 << (s - 1)
    sup = (srem > half) | ((srem == half) & ((q & 1) == 1))
    sub = q + sup.to(torch.int32)
    sub = torch.where(eb >= 100, sub, torch.zeros_like(sub))
    code = torch.where(eb >= 121, normal, sub)
    code = torch.where(a >= 0x43E00000, torch.full_like(code, CODE_MAX), code)  # |x| >= 448, inf
    code = torch.where(a > 0x7F800000, torch.zeros_like(code), code)  # NaN -> 0
    code = torch.where(code == 0, code, code | (sign << 7))
    return code.to(torch.uint8)


def decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3 codes → float32 (exact; the two NaN codes decode to NaN)."""
    c = codes.to(torch.int32)
    e = (c >> 3) & 0xF
    m = (c & 7).to(torch.float32)
    mag = torch.where(e == 0, m * 2.0**-9, (8.0 + m) * torch.exp2((e - 10).to(torch.float32)))
    mag = torch.where((c & 0x7F) == 0x7F, torch.full_like(mag, float("nan")), mag)
    return torch.where(c >= 0x80, -mag, mag)


def hw_encode_wrapped(x: torch.Tensor) -> torch.Tensor:
    """torch's ``float8_e4m3fn`` cast wrapped by the codec's rules (NaN → 0, clamp ±448, −0 → +0)."""
    x = x.to(torch.float32)
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x).clamp(-E4M3_MAX, E4M3_MAX)
    codes = x.to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(codes == 0x80, torch.zeros_like(codes), codes)


def all_finite_codes() -> torch.Tensor:
    """The 254 codes that decode to finite values (0x80, −0, included)."""
    c = torch.arange(256, dtype=torch.int32)
    return c[(c & 0x7F) != 0x7F].to(torch.uint8)
