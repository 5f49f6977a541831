"""OCP MX formats: e2m1 (FP4) elements, e8m0 block scales, MXFP4 weights.

e2m1 code (4 bits): sign = bit 3, magnitude index 0..7 → {0, .5, 1, 1.5, 2, 3, 4, 6}. Encoding rounds
to nearest, ties to the even index (= even mantissa), saturates at ±6; NaN → 0; a zero result is +0.
e8m0 (8 bits): 2^(b - 127), b = 255 is NaN. :func:`e8m0_encode` takes the OCP floor of log2.

MXFP4 weights ``W [N, K]`` (``nn.Linear`` orientation), blocks of 32 consecutive k::

    W[n, k] = e2m1(packed nibble) * 2^(scales[n, k // 32] - 127)

``packed [N, K/2]`` uint8: low nibble = even column k, high nibble = odd column (compressed-tensors'
``weight_packed``); ``scales [N, K/32]`` uint8 biased exponent (``weight_scale``).

Exponent rules (per block, amax = max |w|):
- ``"ocp"``: e = floor(log2 amax) - 2 (compressed-tensors: 127 + floor(log2 amax) - 2); amax/2^e in
  [4, 8), so values above 6·2^e clip to ±6.
- ``"mse"``: the seeds' requant rule, "no-clip vs one-binade-finer per block by squared error":
  e_nc = smallest e with amax <= 6·2^e, candidates {e_nc, e_nc - 1}, keep the one with the smaller
  block squared error (ties → e_nc). e_nc is the OCP exponent or one above it, so the OCP exponent is
  always a candidate and ``mse`` is never worse than ``ocp`` on any block.
An all-zero block gets b = 0. Biased exponents are clamped to [0, 254].
"""

from __future__ import annotations

import torch

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
MX_BLOCK = 32
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """float → uint8 e2m1 codes in 0..15 (RNE, saturating ±6, NaN → 0, zero → +0)."""
    x = x.to(torch.float32)
    a = torch.nan_to_num(x.abs(), nan=0.0)
    idx = torch.zeros(x.shape, dtype=torch.int32, device=x.device)
    for k, m in enumerate(_MIDPOINTS):  # between index k and k+1: up if above, or tie and k odd
        idx += ((a > m) | ((a == m) & (k % 2 == 1))).to(torch.int32)
    sign = ((x < 0) & (idx > 0)).to(torch.int32) << 3
    return (idx | sign).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes (low 4 bits) → float32."""
    c = codes.to(torch.int64) & 15
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = lut[c & 7]
    return torch.where(c >= 8, -mag, mag)


def e8m0_encode(x: torch.Tensor) -> torch.Tensor:
    """positive float → uint8 biased exponent 127 + floor(log2 x), clamped to [0, 254] (0 and below → 0)."""
    x = x.to(torch.float64)
    _, ex = torch.frexp(x)  # x = m·2^ex, m in [0.5, 1)
    b = torch.where(x > 0, ex.to(torch.int64) - 1 + 127, torch.zeros_like(ex, dtype=torch.int64))
    return b.clamp(0, 254).to(torch.uint8)


def e8m0_decode(b: torch.Tensor) -> torch.Tensor:
    """uint8 biased exponent → float32 2^(b - 127) (255 → NaN)."""
    e = b.to(torch.float64) - 127
    v = torch.exp2(e)
    return torch.where(b.to(torch.int64) == 255, torch.full_like(v, float("nan")), v).to(torch.float32)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """codes [N, K] (0..15) → uint8 [N, K/2], low nibble = even column."""
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] → codes uint8 [N, K]."""
    return torch.stack([packed & 15, packed >> 4], dim=-1).reshape(*packed.shape[:-1], -1)


def _block_codes(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    return e2m1_encode((x.to(torch.float64) * torch.exp2(-e.to(torch.float64))[..., None]).to(torch.float32))


def quantize_mxfp4(w: torch.Tensor, rule: str = "ocp") -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] float → (packed uint8 [N, K/2], scales uint8 [N, K/32]); see module doc for the rules."""
    if rule not in ("ocp", "mse"):
        raise ValueError(f"quantize_mxfp4: rule must be 'ocp' or 'mse', got {rule!r}")
    if w.dim() != 2 or w.shape[1] % MX_BLOCK:
        raise ValueError(f"quantize_mxfp4: w must be [N, K] with K % 32 == 0, got {tuple(w.shape)}")
    N, K = w.shape
    x = w.to(torch.float32).reshape(N, K // MX_BLOCK, MX_BLOCK)
    amax = x.abs().amax(dim=-1).to(torch.float64)
    _, ex = torch.frexp(amax)
    e = ex.to(torch.int64) - 1 - 2  # floor(log2 amax) - 2
    if rule == "mse":
        e_nc = torch.where(amax <= 6.0 * torch.exp2(e.to(torch.float64)), e, e + 1)
        cands = [e_nc.clamp(-127, 127), (e_nc - 1).clamp(-127, 127)]
        errs = []
        for c in cands:
            deq = e2m1_decode(_block_codes(x, c)).to(torch.float64) * torch.exp2(c.to(torch.float64))[..., None]
            errs.append(((deq - x.to(torch.float64)) ** 2).sum(-1))
        e = torch.where(errs[1] < errs[0], cands[1], cands[0])
    e = torch.where(amax > 0, e + 127, torch.zeros_like(e)).clamp(0, 254) - 127
    codes = _block_codes(x, e).reshape(N, K)
    return pack_fp4(codes), (e + 127).to(torch.uint8)


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(packed [N, K/2], scales [N, K/32]) → W [N, K] float32."""
    v = e2m1_decode(unpack_fp4(packed))
    s = e8m0_decode(scales).repeat_interleave(MX_BLOCK, dim=-1)
    return v * s
