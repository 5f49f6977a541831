"""Reference skinny GEMM: ``y = x @ w.T`` with fp32 products and accumulation, rounded once to bf16.

x: [M, K] bf16, w: [N, K] bf16 (nn.Linear layout) → y: [M, N] bf16.
"""

import torch


def skinny_gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.float() @ w.float().t()).to(torch.bfloat16)
