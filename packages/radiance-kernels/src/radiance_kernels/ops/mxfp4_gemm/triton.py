"""MXFP4 x e4m3 GEMM kernel (layout and math: :mod:`.reference`); bands, tiles, grouped order and
partition select are the W4A8 GEMM's (:func:`radiance_kernels.ops.w4a8_gemm.triton.launch`); decode
takes its "fused" tile (64 wide, split partials summed in the kernel; 211 registers, no spill at sm_90,
where the wider nib8 tiles spill or reach 255 registers for this kernel).

Convert-and-dot: per 128-k tile the e2m1 codes are decoded and multiplied by their block's 2^(e-127)
(exact in fp32 and in bf16), the e4m3 activations are upcast exactly, and one ``tl.dot`` accumulates in
fp32 — bf16 operands on GPUs (products exact), fp32 under the interpreter (whose bf16 dot is wrong;
its Triton 3.7 has no ``dot_scaled``). The per-token scale is applied in the epilogue.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance_kernels.ops.mxfp4_gemm.reference import MXPrepared, check_inputs
from radiance_kernels.ops.w4a8_gemm.triton import NO_SPECIALIZE, launch, load_nibbles, store_tile, tile_setup

PREFILL_DEFAULT = "k64"  # the W4A8 prefill tiles without predeq (this kernel unpacks in its loop)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _mxfp4_kernel(
    a_ptr, as_ptr, wp_ptr, ws_ptr, part_ptr, out_ptr, cnt_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    SPLIT: tl.constexpr, RW: tl.constexpr, HW: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KS: tl.constexpr, GROUP_M: tl.constexpr,
):
    part, offs_m, offs_n, mask_m, mask_n, g_lo, g_hi = tile_setup(M, N, K, b1, b2, groups_per_split, BM, BN, BK,
                                                                   GROUP_M)
    offs_k = tl.arange(0, KS)
    a_rows = a_ptr + part.to(tl.int64) * M * K + offs_m.to(tl.int64)[:, None] * K
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for g in range(g_lo, g_hi):
        for kk in tl.static_range(0, BK, KS):
            k0 = g * BK + kk
            a = tl.load(a_rows + k0 + offs_k[None, :], mask=mask_m[:, None], other=0).to(tl.float8e4nv, bitcast=True)
            c = load_nibbles(wp_ptr, k0, offs_n, mask_n, N, KS, BN)
            e_rows = k0 // 32 + tl.arange(0, KS // 32)
            e = tl.load(ws_ptr + e_rows[:, None] * N + offs_n[None, :], mask=mask_n[None, :], other=127).to(tl.int32)
            scale = tl.where(e == 0, 5.877471754111438e-39, (e << 23).to(tl.float32, bitcast=True))  # 2^(e-127)
            scale = tl.reshape(tl.broadcast_to(scale[:, None, :], (KS // 32, 32, BN)), (KS, BN))
            j = c & 7
            normal = ((((j >> 1) + 126) << 23) | ((j & 1) << 22)).to(tl.float32, bitcast=True)  # j >= 2
            mag = tl.where(j < 2, j.to(tl.float32) * 0.5, normal)
            w = tl.where(c >= 8, -mag, mag) * scale
            if HW:
                acc = tl.dot(a.to(tl.bfloat16), w.to(tl.bfloat16), acc)
            else:
                acc = tl.dot(a.to(tl.float32), w, acc)
    acc *= tl.load(as_ptr + part * M + offs_m, mask=mask_m, other=0.0)[:, None]
    store_tile(acc, part_ptr, out_ptr, cnt_ptr, offs_m, offs_n, mask_m, mask_n, M, N, stride_om, SPLIT, not HW, RW)


def gemm(A, AS, w: MXPrepared, bounds: list[int], band: str = "auto", out: torch.Tensor | None = None,
         cfg: dict | None = None) -> torch.Tensor:
    """Triton MXFP4 x e4m3 GEMM → bf16 [M, N] (or rows < M of ``out``); ``cfg`` overrides the tile config."""
    P, M, K, N = check_inputs(A, AS, w, bounds, "mxfp4_gemm")
    return launch(_mxfp4_kernel, M, N, K, bounds, band, out, A.device, "mxfp4_gemm",
                  (A.contiguous(), AS.contiguous(), w.wp, w.ws), cfg, decode="fused", prefill=PREFILL_DEFAULT)
