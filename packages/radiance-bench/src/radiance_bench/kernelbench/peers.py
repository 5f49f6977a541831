"""Peers measured on the same device in the same run: cuBLAS bf16, ``torch._scaled_mm`` fp8, and
GemLite's Triton A16W4 / A8W4 group-128 kernels when the ``gemlite`` package is importable."""

from __future__ import annotations

import torch

from radiance_bench.kernelbench.ceilings import fp8_gemm


def cublas_bf16(M: int, N: int, K: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn(N, K, generator=g, device="cuda").to(torch.bfloat16)
    return lambda: x @ w.t(), w.numel() * 2


def scaled_mm_fp8(M: int, N: int, K: int, seed: int):
    return fp8_gemm(M, N, K), N * K


def gemlite(kind: str, M: int, N: int, K: int, seed: int):
    """GemLite ``A16W4`` or ``A8W4`` (HQQ-style asymmetric int4, group 128, fp16 activations)."""
    from gemlite import helper

    g = torch.Generator(device="cuda").manual_seed(seed)
    wq = torch.randint(0, 16, (N, K), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(N, K // 128, generator=g, device="cuda") * 2e-3).to(torch.float16)
    zeros = torch.randint(0, 16, (N, K // 128), generator=g, device="cuda").to(torch.float16)
    cls = {"A16W4": helper.A16W4_HQQ_INT, "A8W4": helper.A8W4_HQQ_INT_dynamic}[kind]
    layer = cls(device="cuda", dtype=torch.float16).from_weights(wq, scales, zeros)
    x = torch.randn(M, K, generator=g, device="cuda").to(torch.float16)
    return lambda: layer(x), N * K // 2 + 2 * N * (K // 128) * 2
