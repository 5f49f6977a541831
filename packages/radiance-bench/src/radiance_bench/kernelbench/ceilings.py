"""The device's own ceilings, measured in the same run as the kernels they judge."""

from __future__ import annotations

import torch

from radiance_bench.kernelbench.timing import graph_time


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy, bytes read + written per second (TB/s)."""
    src = [torch.randn(nbytes // 4, device="cuda") for _ in range(2)]
    dst = [torch.empty_like(s) for s in src]
    t = graph_time([lambda i=i: dst[i].copy_(src[i]) for i in range(2)], min_calls=8)
    return 2 * nbytes / (t.best_us * 1e-6) / 1e12


def read_bandwidth(nbytes: int = 1 << 30) -> float:
    """A read-only stream (``Tensor.sum`` over fp32), bytes read per second (TB/s): the decode band's limit,
    which only reads weights. On the H200 this sits well above the copy figure."""
    src = [torch.randn(nbytes // 4, device="cuda") for _ in range(2)]
    t = graph_time([lambda i=i: src[i].sum() for i in range(2)], min_calls=8)
    return nbytes / (t.best_us * 1e-6) / 1e12


def bf16_tflops(n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = graph_time([lambda: a @ b], min_calls=8)
    return 2 * n**3 / (t.best_us * 1e-6) / 1e12


def fp8_gemm(M: int, N: int, K: int):
    """A callable for ``torch._scaled_mm`` fp8 at (M, N, K): x [M,K] e4m3 @ w [N,K]^T, per-tensor scales."""
    a = (torch.randn(M, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def fp8_tflops(n: int = 8192) -> float:
    t = graph_time([fp8_gemm(n, n, n)], min_calls=8)
    return 2 * n**3 / (t.best_us * 1e-6) / 1e12


def measure() -> dict:
    return {"copy_TBps": copy_bandwidth(), "read_TBps": read_bandwidth(), "bf16_TFLOPs": bf16_tflops(),
            "fp8_TFLOPs": fp8_tflops()}
