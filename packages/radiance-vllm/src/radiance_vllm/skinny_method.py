"""The linears a rotated checkpoint leaves in bf16, with ``radiance::skinny_gemm`` for the skinny ones at decode.

The GDN gate projection ``in_proj_ba`` (N = 2 x value heads: 96 on the 27B-class targets at TP = 1, K = hidden) is
kept in bf16 by the ParoQuant producers and runs once per GDN layer. At decode (M ≤ :data:`MAX_M`) with
:data:`MIN_N` ≤ N ≤ :data:`MAX_N`, bf16 activations and no bias it runs the split-K skinny GEMM (fp32 accumulation,
one rounding; H200 kernel bench, N = 96, K = 5120, M = 1 / 8 / 16: 4.7 / 5.0 / 5.2 µs against cuBLAS bf16's 6.1 /
6.2 / 6.3, `docs/PERFORMANCE.md`) — after in_proj_qkvz's GEMM on the same input where the stream producers handed
that GEMM its activations (:func:`radiance_vllm.stream.hand_after`); every other shape, dtype or a bias takes vLLM's
own unquantized GEMM.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.linear import UnquantizedLinearMethod

from radiance_vllm.backend import kernel_backend
from radiance_vllm.stream import take_after

#: the decode band measured (M = 1, 8, 16)
MAX_M = 16
#: a full 16-column tile of the kernel at least (the gate projections: N = 48 at TP = 2, 96 at TP = 1)
MIN_N, MAX_N = 16, 128


class SkinnyLinearMethod(UnquantizedLinearMethod):
    """vLLM's unquantized linear, the skinny shapes at decode on ``radiance::skinny_gemm``."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        layer.skinny_weight = layer.weight.data  # vLLM's CPU path packs the weight for oneDNN and drops it
        super().process_weights_after_loading(layer)

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        from radiance_vllm import kernel_calls

        w = layer.skinny_weight
        x2 = x.reshape(-1, x.shape[-1])
        after = take_after(layer, x2)  # in_proj_ba: in_proj_qkvz's GEMM on the same input ran just before
        if skinny(x2, w, bias):
            return kernel_calls.skinny_gemm(x2, w, kernel_backend(), after).reshape(*x.shape[:-1], w.shape[0])
        return super().apply(layer, x, bias)


def skinny(x2: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether ``x2 [M, K] @ w.T`` runs the skinny GEMM."""
    return (bias is None and x2.dtype == w.dtype == torch.bfloat16 and x2.shape[0] <= MAX_M
            and MIN_N <= w.shape[0] <= MAX_N)
