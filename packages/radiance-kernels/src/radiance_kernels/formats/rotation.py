"""ParoQuant rotation records: channel scaling plus ``krot`` layers of Givens rotations per 128-group.

Layout (one linear's input side, K channels, G = K/128 groups):

- ``pairs`` [krot, K] int16, local to each group: in layer r, group g, pair t (t < 64) rotates channels
  ``128g + pairs[r, 128g+2t]`` and ``128g + pairs[r, 128g+2t+1]``; each group's 128 entries are a
  permutation of 0..127, so a layer's 64 pairs are disjoint.
- ``theta`` [krot, K/2] fp16: pair t of group g in layer r has angle ``theta[r, 64g+t]``.
- ``channel_scales`` [1, K] fp16, stored pre-inverted: activations are multiplied by it.

Rotation of an activation row x: ``x *= channel_scales``, then for r = 0..krot-1 and every pair (i, j)
of layer r with c = cos θ, s = sin θ: ``x_i' = c·x_i + s·x_j``, ``x_j' = −s·x_i + c·x_j``. As a matrix,
``rotate(x) == (x * channel_scales) @ R.T`` with R = L_{krot-1} ⋯ L_0 (:func:`dense_matrix`), so a
linear with dequantised weight W computes ``y = rotate(x) @ W.T``.

Numerics of :func:`rotate` (the spec the kernels follow bit for bit in fp32): cos/sin are computed in
fp64 from the fp16 angle and rounded once to the compute dtype; every product and sum is a separately
rounded IEEE operation, in the order ``(c·x_k) + (s_k·x_partner)`` with ``s_k = +s`` for the first
member of a pair and ``−s`` for the second (no fused multiply-add).
"""

from __future__ import annotations

import math

import torch

GROUP = 128


def _fail(name: str, problem: str) -> None:
    raise ValueError(f"rotation {name}: {problem}")


def validate_rotation(
    pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, name: str = "rotation"
) -> None:
    """Raise ValueError naming the tensor and the problem unless the records are well formed."""
    if pairs.dtype != torch.int16 or pairs.dim() != 2:
        _fail(name, f"pairs must be int16 [krot, K], got {pairs.dtype} {list(pairs.shape)}")
    krot, K = pairs.shape
    if krot < 1 or K % GROUP:
        _fail(name, f"pairs [krot, K] needs krot >= 1 and K a multiple of {GROUP}, got {list(pairs.shape)}")
    if theta.dtype != torch.float16 or list(theta.shape) != [krot, K // 2]:
        _fail(name, f"theta must be float16 [{krot}, {K // 2}], got {theta.dtype} {list(theta.shape)}")
    if channel_scales.dtype != torch.float16 or list(channel_scales.shape) != [1, K]:
        _fail(
            name,
            f"channel_scales must be float16 [1, {K}], got {channel_scales.dtype} {list(channel_scales.shape)}",
        )
    grouped = pairs.to(torch.int64).reshape(krot, K // GROUP, GROUP).sort(dim=-1).values
    bad = (grouped != torch.arange(GROUP, device=pairs.device)).any(dim=-1).nonzero()
    if bad.numel():
        r, g = bad[0].tolist()
        _fail(name, f"pairs layer {r} group {g} is not a permutation of 0..{GROUP - 1} ({len(bad)} bad)")
    if not torch.isfinite(theta).all():
        _fail(name, f"theta has {int((~torch.isfinite(theta)).sum())} non-finite angles")
    cs = channel_scales.float()
    if not torch.isfinite(cs).all() or (cs == 0).any():
        _fail(name, f"channel_scales has {int((~torch.isfinite(cs) | (cs == 0)).sum())} zero/non-finite entries")


def random_rotation(
    K: int, krot: int = 8, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deterministic valid records (pairs, theta, channel_scales) for tests: random per-group pairings,
    angles uniform in (−π, π), channel scales exp(U(−0.5, 0.5))."""
    if K % GROUP:
        raise ValueError(f"random_rotation: K={K} is not a multiple of {GROUP}")
    gen = torch.Generator().manual_seed(seed)
    pairs = torch.stack(
        [torch.randperm(GROUP, generator=gen) for _ in range(krot * (K // GROUP))]
    ).reshape(krot, K).to(torch.int16)
    theta = ((torch.rand(krot, K // 2, generator=gen) * 2 - 1) * math.pi).to(torch.float16)
    scales = torch.exp(torch.rand(1, K, generator=gen) - 0.5).to(torch.float16)
    return pairs.to(device), theta.to(device), scales.to(device)


def random_rotations(
    P: int, K: int, krot: int = 8, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """P stacked records in the ops' layout: pairs [P, krot, K], theta [P, krot, K/2], channel_scales [P, K]."""
    recs = [random_rotation(K, krot, seed * 1000 + p, device) for p in range(P)]
    return (torch.stack([r[0] for r in recs]), torch.stack([r[1] for r in recs]),
            torch.cat([r[2] for r in recs]))


def givens_tables(
    pairs: torch.Tensor, theta: torch.Tensor, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-channel form of the layers, for pairs [..., krot, K] and theta [..., krot, K/2].

    Returns (partner int32 [..., krot, K]: the local index 0..127 of the channel's pair mate,
    cos [..., krot, K], sin_signed [..., krot, K]) in ``dtype``, so that one layer is
    ``x_k' = cos_k·x_k + sin_signed_k·x_{128g + partner_k}``.
    """
    *lead, krot, K = pairs.shape
    idx = pairs.to(torch.int64).reshape(*lead, krot, K // GROUP, GROUP // 2, 2)
    first, second = idx[..., 0], idx[..., 1]
    t = theta.reshape(*lead, krot, K // GROUP, GROUP // 2).to(torch.float64)
    c, s = t.cos().to(dtype), t.sin().to(dtype)
    shape = (*lead, krot, K // GROUP, GROUP)
    partner = torch.empty(shape, dtype=torch.int64, device=pairs.device)
    cos = torch.empty(shape, dtype=dtype, device=pairs.device)
    sin = torch.empty(shape, dtype=dtype, device=pairs.device)
    partner.scatter_(-1, first, second)
    partner.scatter_(-1, second, first)
    cos.scatter_(-1, first, c)
    cos.scatter_(-1, second, c)
    sin.scatter_(-1, first, s)
    sin.scatter_(-1, second, -s)
    return partner.reshape(*lead, krot, K).to(torch.int32), cos.reshape(*lead, krot, K), sin.reshape(*lead, krot, K)


def rotate(
    x: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Reference rotation of x [..., K] (see the module docstring for the exact op order), in ``dtype``."""
    krot, K = pairs.shape
    partner, cos, sin = givens_tables(pairs, theta, dtype)
    base = torch.arange(0, K, GROUP, device=x.device, dtype=torch.int64).repeat_interleave(GROUP)
    mate = partner.to(torch.int64) + base
    y = x.to(dtype) * channel_scales.reshape(K).to(dtype)
    for r in range(krot):
        y = cos[r] * y + sin[r] * y[..., mate[r]]
    return y


def dense_matrix(pairs: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """fp64 [K, K] (CPU) block-diagonal R = L_{krot-1} ⋯ L_0, built from explicit 2×2 Givens blocks, with
    ``rotate(x, ..., dtype=float64) == (x * channel_scales) @ R.T``."""
    krot, K = pairs.shape
    idx = pairs.to(torch.int64).reshape(krot, K // GROUP, GROUP // 2, 2)
    t = theta.to(torch.float64).reshape(krot, K // GROUP, GROUP // 2)
    c, s = t.cos(), t.sin()
    R = torch.zeros(K, K, dtype=torch.float64)
    for g in range(K // GROUP):
        block = torch.eye(GROUP, dtype=torch.float64)
        for r in range(krot):
            i, j = idx[r, g, :, 0].cpu(), idx[r, g, :, 1].cpu()
            L = torch.zeros(GROUP, GROUP, dtype=torch.float64)
            L[i, i], L[i, j] = c[r, g].cpu(), s[r, g].cpu()
            L[j, i], L[j, j] = -s[r, g].cpu(), c[r, g].cpu()
            block = L @ block
        R[g * GROUP:(g + 1) * GROUP, g * GROUP:(g + 1) * GROUP] = block
    return R
