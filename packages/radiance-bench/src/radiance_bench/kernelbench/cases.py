"""Inputs for the kernel benches: random weights in each format and random rotations at a projection
shape (``radiance_kernels.shapes.Proj``), built directly on the GPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.w4a8_gemm import W4Prepared, prepare_codes
from radiance_kernels.shapes import Proj

GROUP = 128


@dataclass
class W4Weight:
    """One projection's W4A8 weight in the kernel layout, plus its rotations."""

    w: W4Prepared
    pairs: torch.Tensor
    theta: torch.Tensor
    cs: torch.Tensor
    bounds: list[int]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.w.wq, self.w.wh, self.w.sz))


def w4_weight(proj: Proj, bits: int, seed: int) -> W4Weight:
    g = torch.Generator(device="cuda").manual_seed(seed)
    K, N = proj.K, proj.N
    codes = torch.randint(0, 1 << bits, (K, N), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 1 << bits, (K // GROUP, N), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(K // GROUP, N, generator=g, device="cuda") * 2e-3 + 1e-4).to(torch.float16)
    w = prepare_codes(codes, zeros, scales, bits)
    pairs, theta, cs = random_rotations(proj.P, K, seed=seed, device="cuda")
    return W4Weight(w, pairs, theta, cs, list(proj.bounds))


def activations(M: int, K: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)


def w4a8_linear(x: torch.Tensor, wt: W4Weight, elem: str = "e4m3", gran: str = "group", zpe: bool = False,
                band: str = "auto"):
    """The served W4A8 linear: one rotate+quant launch (all partitions) + one GEMM launch."""
    A, AS, RS = torch.ops.radiance.rotate_quant(x, wt.pairs, wt.theta, wt.cs, elem, gran, "triton")
    return torch.ops.radiance.w4a8_gemm(A, AS, RS, wt.w.wq, wt.w.wh, wt.w.sz, wt.bounds, wt.w.bits, zpe,
                                        band, "triton")
