"""Inputs for the kernel benches: random weights in each format and random rotations at a projection
shape (``radiance_kernels.shapes.Proj``), built directly on the GPU (or on ``device``)."""

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


def w4_weight(proj: Proj, bits: int, seed: int, device="cuda") -> W4Weight:
    g = torch.Generator(device=device).manual_seed(seed)
    K, N = proj.K, proj.N
    codes = torch.randint(0, 1 << bits, (K, N), generator=g, device=device, dtype=torch.uint8)
    zeros = torch.randint(0, 1 << bits, (K // GROUP, N), generator=g, device=device, dtype=torch.uint8)
    scales = (torch.rand(K // GROUP, N, generator=g, device=device) * 2e-3 + 1e-4).to(torch.float16)
    w = prepare_codes(codes, zeros, scales, bits)
    pairs, theta, cs = random_rotations(proj.P, K, seed=seed, device=device)
    return W4Weight(w, pairs, theta, cs, list(proj.bounds))


def activations(M: int, K: int, seed: int, device="cuda") -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(M, K, generator=g, device=device).to(torch.bfloat16)


def w4a8_gemm(wt: W4Weight, A: torch.Tensor, AS: torch.Tensor, RS: torch.Tensor, zpe: bool = False,
              band: str = "auto") -> torch.Tensor:
    """The W4A8 GEMM launch on quantised activations ``(A, AS, RS)``."""
    return torch.ops.radiance.w4a8_gemm(A, AS, RS, wt.w.wq, wt.w.wh, wt.w.sz, wt.bounds, wt.w.bits, zpe, band,
                                        "triton")


def rotate_quant(x: torch.Tensor, wt: W4Weight, elem: str = "e4m3", gran: str = "group"):
    """``wt``'s rotate+quant prologue on ``x``: (A, AS, RS) for every partition, one launch."""
    return torch.ops.radiance.rotate_quant(x, wt.pairs, wt.theta, wt.cs, elem, gran, "triton")


def w4a8_linear(x: torch.Tensor, wt: W4Weight, elem: str = "e4m3", gran: str = "group", zpe: bool = False,
                band: str = "auto"):
    """The served W4A8 linear: one rotate+quant launch (all partitions) + one GEMM launch."""
    return w4a8_gemm(wt, *rotate_quant(x, wt, elem, gran), zpe, band)


#: The stream producer that makes each projection's input in a served 27B-class layer (Qwen3-Next:
#: Gemma-style norms, a sigmoid output gate on attention, a per-head gated RMSNorm on the GDN output).
PRODUCER_OF = {"attn.qkv": "add_rms_gemma", "mlp.gate_up": "add_rms_gemma", "gdn.in_proj_qkvz": "add_rms_gemma",
               "attn.o_proj": "sigmoid_gate", "mlp.down": "silu_mul", "gdn.out_proj": "gated_rms_norm"}


def producer_calls(proj_name: str, M: int, K: int, seed: int, wt: W4Weight, elem: str = "e4m3"):
    """(fused, plain) calls of ``proj_name``'s producer on fresh inputs. The fused one ends in ``wt``'s
    rotate+quant (``elem``, per-group) and returns (A, AS, RS); the plain one is the same producer without
    it, returning the linear's bf16 input — what an unrotated bf16 layer runs anyway, so
    ``fused - plain`` is what the rotation costs."""
    kind = PRODUCER_OF[proj_name]
    x, y = activations(M, K, seed), activations(M, K, seed + 1)
    ops = torch.ops.radiance
    rot = (wt.pairs, wt.theta, wt.cs, elem, "group", "triton")
    if kind == "add_rms_gemma":
        weight = activations(1, K, seed + 2)[0]
        return (lambda: ops.add_rms_norm_rotate_quant(x, y, weight, 1e-6, True, *rot)[2:],
                lambda: ops.add_rms_norm(x, y, weight, 1e-6, True, "triton")[0])
    weight = activations(1, GROUP, seed + 2)[0] if kind == "gated_rms_norm" else None
    return (lambda: ops.gated_rotate_quant(kind, x, y, weight, 1e-6, *rot),
            lambda: ops.gated(kind, x, y, weight, 1e-6, "triton"))
