"""Hidden-state storage: e4m3 codes with one float32 scale per token and tapped layer.

``x[t, l, :] ≈ decode(codes[t, l*H:(l+1)*H]) * scale[t, l]`` with ``scale = amax / 448`` (1 for an all-zero
row), so every row uses the full e4m3 range; relative error per element is at most 2^-4 for normals.
"""

from __future__ import annotations

import torch

from radiance_kernels.formats import e4m3


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, L, H] → (codes uint8 [T, L*H], scale float32 [T, L])."""
    if x.dim() != 3:
        raise ValueError(f"hidden states must be [tokens, layers, hidden], got shape {tuple(x.shape)}")
    x = x.to(torch.float32)
    amax = x.abs().amax(-1)
    scale = torch.where(amax > 0, amax / e4m3.E4M3_MAX, torch.ones_like(amax))
    codes = e4m3.encode(x / scale[..., None])
    return codes.reshape(x.shape[0], -1), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(codes [T, L*H], scale [T, L]) → float32 [T, L*H] (the layers concatenated, as the drafter's fc reads)."""
    t, n_layers = scale.shape
    if codes.shape[0] != t or codes.shape[1] % n_layers:
        raise ValueError(f"codes {tuple(codes.shape)} do not match scales {tuple(scale.shape)}")
    x = e4m3.decode(codes).view(t, n_layers, -1) * scale[..., None]
    return x.reshape(t, -1)
