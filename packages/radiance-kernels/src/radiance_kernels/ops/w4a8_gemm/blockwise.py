"""W4A8 prefill through a vendor block-scaled fp8 GEMM: the ``blockwise`` config of :data:`.triton.PREFILL`.

int4 weights with e4m3 activations only. Per call, :func:`.triton.unpack_w8` with the zero folded in writes
``w8 [N, K] = e4m3(q - z)`` (exact: ``|q - z| <= 15``), then per activation partition ``p`` one
``torch._scaled_mm`` with 1 x 128 block scales on both operands (cuBLASLt, CUDA >= 12.9, sm_90):

    out[m, n] = sum_g as[m, g] * s[g, n] * sum_{k in g} a[m, k] * (q[k, n] - z[g, n])

— the reference's math with the zero point inside the 8-bit operand (no row-sum term; ``zpe`` and ``RS`` are
not read). The library accumulates each 128-block in fp32 and applies both scales per block, as the Triton
loop does; its summation order differs (bf16-floor agreement, tested against the reference on the GPU).
Scale layouts ``_scaled_mm`` asks for: ``scale_a [M, G]`` M-contiguous, ``scale_b [G, Np]`` contiguous (the
weight scales' own layout, one copy per partition slice). ``torch._scaled_mm`` writes each partition's columns
of ``out`` in place. The portable twin is the Triton ``predeq`` loop (same operand, no vendor library).
"""

from __future__ import annotations

from functools import cache

import torch

from radiance_kernels.ops.w4a8_gemm.reference import GROUP, W4Prepared, group_scales

#: cuBLASLt's 1x128 x 1x128 fp8 recipe: torch's CUDA build from 12.9, NVIDIA compute capability 9.0.
MIN_CUDA = (12, 9)
CAPABILITY = (9, 0)


@cache
def unsupported(device: torch.device, bits: int, int8: bool) -> str | None:
    """Why the ``blockwise`` config cannot run here (None: it can); asked once per (device, bits, element)."""
    if bits != 4 or int8:
        return f"int4 weights with e4m3 activations only (got int{bits}, {'int8' if int8 else 'e4m3'}: " \
               "q - z is not exact in e4m3 past 16 / int8 activations have no block-scaled library GEMM)"
    device = torch.device(device)
    if device.type != "cuda" or torch.version.cuda is None:
        return f"an NVIDIA CUDA device (got {device.type}{', ROCm' if torch.version.hip else ''})"
    cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2])
    if cuda < MIN_CUDA:
        return f"torch built with CUDA >= {MIN_CUDA[0]}.{MIN_CUDA[1]} (got {torch.version.cuda})"
    cap = torch.cuda.get_device_capability(device)
    if cap != CAPABILITY:
        return f"compute capability {CAPABILITY} (got {cap})"
    return None


def activation_scales(AS: torch.Tensor, p: int, rows: int, G: int) -> torch.Tensor:
    """``scale_a [rows, G]`` fp32, M-contiguous, of partition ``p`` (per-token scales repeated per group;
    rows past M, if padded, scale zero rows of A)."""
    s = AS[p] if AS.dim() == 3 else AS[p][:, None].expand(-1, G)
    out = torch.zeros(G, rows, dtype=torch.float32, device=AS.device)
    out[:, : s.shape[0]] = s.t()
    return out.t()


def gemm(A: torch.Tensor, AS: torch.Tensor, w: W4Prepared, bounds: list[int], out: torch.Tensor,
         unpack) -> torch.Tensor:
    """``out[:M]`` = the W4A8 GEMM of e4m3 codes ``A [P, M, K]`` (uint8) through ``torch._scaled_mm``;
    ``unpack()`` gives ``w8 [N, K]`` with the zero folded in (uint8 e4m3 codes)."""
    P, M, K = A.shape
    G = K // GROUP
    rows = -(-M // 4) * 4  # cuBLASLt wants M % 4 == 0: zero rows in, their outputs dropped
    w8 = unpack().view(torch.float8_e4m3fn)
    s = group_scales(w.sz).float()
    for p in range(P):
        lo, hi = bounds[p], bounds[p + 1]
        a = A[p].view(torch.float8_e4m3fn)
        if rows != M:
            a = torch.cat([a.view(torch.uint8), a.new_zeros(rows - M, K, dtype=torch.uint8)]).view(a.dtype)
        args = (a, w8[lo:hi].t())
        kw = dict(scale_a=activation_scales(AS, p, rows, G), scale_b=s[:, lo:hi].contiguous(),
                  out_dtype=torch.bfloat16)
        if rows == M:
            torch._scaled_mm(*args, **kw, out=out[:M, lo:hi])
        else:
            out[:M, lo:hi] = torch._scaled_mm(*args, **kw)[:M]
    return out
