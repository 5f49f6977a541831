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
    a = bits & 0x7FFFFFFF
    eb = a >> 23  # biased float32 exponent
    # normal e4m3 range, |x| >= 2^-6 (eb >= 121): round the bit pattern to nearest-even at bit 20 — a
    # mantissa carry rolls into the exponent — and rebias the exponent from 127 to 7
    normal = ((a >> 20) & 1).add_(a).add_(0x7FFFF).bitwise_right_shift_(20).sub_(120 << 3)
    # subnormal e4m3 range: the 24-bit significand times 2^(eb-150), rounded to nearest-even in units of
    # 2^-9, i.e. shifted right by s = 141 - eb (every |x| < 2^-10, float32 subnormals included, gives 0)
    big = (a & 0x7FFFFF).bitwise_or_(0x800000)
    s = (141 - eb).clamp_(1, 25)
    sub = ((big >> s) & 1).add_(big).add_((1 << (s - 1)) - 1).bitwise_right_shift_(s)
    code = torch.where(eb >= 121, normal, sub)
    code.masked_fill_(a >= 0x43E00000, CODE_MAX)  # |x| >= 448, inf
    code.masked_fill_(a > 0x7F800000, 0)  # NaN -> 0
    code |= ((bits >> 31) & 1).bitwise_left_shift_(7).masked_fill_(code == 0, 0)  # sign, never on zero
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
    x = torch.nan_to_num(x.to(torch.float32), nan=0.0).clamp_(-E4M3_MAX, E4M3_MAX)
    codes = x.to(torch.float8_e4m3fn).view(torch.uint8)
    return codes.masked_fill_(codes == 0x80, 0)


def all_finite_codes() -> torch.Tensor:
    """The 254 codes that decode to finite values (0x80, −0, included)."""
    c = torch.arange(256, dtype=torch.int32)
    return c[(c & 0x7F) != 0x7F].to(torch.uint8)
