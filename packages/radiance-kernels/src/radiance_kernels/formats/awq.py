"""AWQ-packed uniform asymmetric weights (int4, and int5 as AWQ low nibbles + a fifth-bit plane).

Weights are ``W [K, N]`` (input channel k, output channel n; the transpose of ``nn.Linear.weight``),
quantised in groups of ``g`` (128) consecutive k per column n::

    W[k, n] = (q[k, n] - z[k // g, n]) * s[k // g, n]        q, z in [0, 2^b - 1]  (z NOT offset by one)

Packing (int32 words, ``N % 8 == 0``): word ``w`` of a row holds columns ``8w .. 8w+7``; nibble slot
``i`` (bits ``4i .. 4i+3``) holds column ``8w + AWQ_ORDER[i]``. int5 ("int5-bitplane"): ``lo`` is
the AWQ packing of ``q & 15``; ``hi [R, N/32]`` int32 has bit ``j`` of word ``w`` = bit 4 of column
``32w + j`` (``N % 32 == 0``).

Checkpoint tensors per linear: ``qweight [K, N/8]``, ``qzeros [K/g, N/8]`` int32, ``scales [K/g, N]``
fp16, and for int5 ``qweight_hi [K, N/32]``, ``qzeros_hi [K/g, N/32]`` int32.

Quantiser: the RTN grid of z-lab ParoQuant's ``UniformAffineQuantizer`` (paroquant/optim/quantizer.py,
``_calc_scales_and_zero_points`` + ``pseudo_quantize``), matched term by term:
``s = max(max_g - min_g, 1e-5) / (2^b - 1)`` clamped to [1e-5, 1e5]; ``z = clamp(-round(min_g / s), 0,
2^b - 1)``; ``q = clamp(round(w / s) + z, 0, 2^b - 1)`` (torch.round: half to even), in fp32 over
groups of ``g`` input channels. One deliberate difference: ``s`` is rounded to fp16 *before* ``z`` and
``q`` are computed, so the stored checkpoint dequantises to exactly the grid the codes were chosen on.
``pow2=True`` projects ``s`` up to the next power of two (2^ceil(log2 s): never clips more than RTN).
"""

from __future__ import annotations

import torch

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_INV = tuple(AWQ_ORDER.index(c) for c in range(8))  # column c sits in slot _AWQ_INV[c]


def _check(t: torch.Tensor, name: str, ndim: int, mult: int, dim: int = -1) -> None:
    if t.dim() != ndim or t.shape[dim] % mult:
        raise ValueError(f"{name}: expected a {ndim}-d tensor with shape[{dim}] % {mult} == 0, got {tuple(t.shape)}")


def _to_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 holding 32-bit patterns → int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """codes [R, N] in 0..15 → int32 [R, N/8], AWQ nibble order."""
    _check(codes, "codes", 2, 8)
    c = codes.to(torch.int64).reshape(codes.shape[0], -1, 8)
    words = torch.zeros(c.shape[:2], dtype=torch.int64, device=codes.device)
    for slot, col in enumerate(AWQ_ORDER):
        words |= (c[..., col] & 15) << (4 * slot)
    return _to_int32(words)


def unpack_int4(qweight: torch.Tensor) -> torch.Tensor:
    """int32 [R, N/8] → codes uint8 [R, N]."""
    w = qweight.to(torch.int64) & 0xFFFFFFFF
    cols = [(w >> (4 * _AWQ_INV[c])) & 15 for c in range(8)]
    return torch.stack(cols, dim=-1).reshape(qweight.shape[0], -1).to(torch.uint8)


def pack_bitplane(codes: torch.Tensor, bit: int = 4) -> torch.Tensor:
    """Bit ``bit`` of codes [R, N] → int32 [R, N/32], bit j of word w = column 32w + j."""
    _check(codes, "codes", 2, 32)
    b = ((codes.to(torch.int64) >> bit) & 1).reshape(codes.shape[0], -1, 32)
    words = (b << torch.arange(32, dtype=torch.int64, device=codes.device)).sum(-1)
    return _to_int32(words)


def unpack_bitplane(plane: torch.Tensor) -> torch.Tensor:
    """int32 [R, N/32] → bits uint8 [R, N]."""
    w = plane.to(torch.int64) & 0xFFFFFFFF
    bits = (w[..., None] >> torch.arange(32, dtype=torch.int64, device=plane.device)) & 1
    return bits.reshape(plane.shape[0], -1).to(torch.uint8)


def pack_int5(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """codes [R, N] in 0..31 → (lo int32 [R, N/8] = AWQ packing of the low nibbles, hi int32 [R, N/32])."""
    _check(codes, "codes", 2, 32)
    return pack_int4(codes.to(torch.int64) & 15), pack_bitplane(codes, 4)


def unpack_int5(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """(lo [R, N/8], hi [R, N/32]) → codes uint8 [R, N] in 0..31."""
    return unpack_int4(lo) | (unpack_bitplane(hi) << 4)


def quantize_asym(
    w: torch.Tensor, bits: int, group_size: int = 128, pow2: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [K, N] float → (codes uint8 [K, N], zeros uint8 [K/g, N], scales fp16 [K/g, N]); see module doc."""
    if bits not in (4, 5):
        raise ValueError(f"quantize_asym: bits must be 4 or 5, got {bits}")
    _check(w, "w", 2, group_size, dim=0)
    K, N = w.shape
    qmax = 2**bits - 1
    x = w.to(torch.float32).reshape(K // group_size, group_size, N)
    lo, hi = x.amin(dim=1), x.amax(dim=1)
    s = ((hi - lo).clamp(min=1e-5) / qmax).clamp(1e-5, 1e5)
    if pow2:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    s = s.to(torch.float16).to(torch.float32)
    z = torch.round(-(lo / s)).clamp(0, qmax)
    q = (torch.round(x / s[:, None]) + z[:, None]).clamp(0, qmax)
    return q.reshape(K, N).to(torch.uint8), z.to(torch.uint8), s.to(torch.float16)


def dequantize(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """W [K, N] fp32 = (q - z[k//g]) * s[k//g]."""
    z = zeros.to(torch.float32).repeat_interleave(group_size, dim=0)
    s = scales.to(torch.float32).repeat_interleave(group_size, dim=0)
    return (codes.to(torch.float32) - z) * s


def to_checkpoint(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, bits: int) -> dict[str, torch.Tensor]:
    """Codes/zeros/scales → the checkpoint tensors (``qweight``, ``qzeros``, ``scales`` [+ ``*_hi`` for int5])."""
    if bits == 4:
        return {"qweight": pack_int4(codes), "qzeros": pack_int4(zeros), "scales": scales.to(torch.float16)}
    if bits == 5:
        qw, qw_hi = pack_int5(codes)
        qz, qz_hi = pack_int5(zeros)
        return {"qweight": qw, "qzeros": qz, "scales": scales.to(torch.float16),
                "qweight_hi": qw_hi, "qzeros_hi": qz_hi}
    raise ValueError(f"to_checkpoint: bits must be 4 or 5, got {bits}")


def from_checkpoint(t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Checkpoint tensors → (codes [K, N], zeros [K/g, N], scales fp16 [K/g, N], bits)."""
    if "qweight_hi" in t:
        return unpack_int5(t["qweight"], t["qweight_hi"]), unpack_int5(t["qzeros"], t["qzeros_hi"]), t["scales"], 5
    return unpack_int4(t["qweight"]), unpack_int4(t["qzeros"]), t["scales"], 4
