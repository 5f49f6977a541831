"""W4A8 prefill through a vendor block-scaled fp8 GEMM: the ``blockwise`` config of :data:`.triton.PREFILL`.

int4 weights with e4m3 activations only. Per call, :func:`.triton.unpack_w8` with the zero folded in writes
``w8 [N, K] = e4m3(q - z)`` (exact: ``|q - z| <= 15``), then per activation partition ``p`` one
``torch._scaled_mm`` with 1 x 128 block scales on both operands (cuBLASLt, CUDA >= 12.9, sm_90):

    out[m, n] = sum_g as[m, g] * s[g, n] * sum_{k in g} a[m, k] * (q[k, n] - z[g, n])

— the reference's math with the zero point inside the 8-bit operand (no row-sum term; ``zpe`` and ``RS`` are
not read). The library accumulates each 128-block in fp32 and applies both scales per block, as the Triton
loop does; its summation order differs (bf16-floor agreement, tested against the reference on the GPU).
Scale layouts ``_scaled_mm`` asks for: ``scale_a [M, G]`` M-contiguous (every partition's from one copy of the
activation scales), ``scale_b [G, Np]`` contiguous (written per partition by the unpack's launch, beside ``w8``).
``torch._scaled_mm`` writes each partition's columns of ``out`` in place. The portable twin is the Triton ``predeq``
loop (same operand, no vendor library).
"""

from __future__ import annotations

from functools import cache

import torch

from radiance_kernels.ops.w4a8_gemm.reference import GROUP

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


def activation_scales(AS: torch.Tensor, rows: int, G: int) -> torch.Tensor:
    """``scale_a`` of every partition in one copy: ``[P, G, rows]`` fp32, whose ``[p].t()`` is partition p's
    ``[rows, G]`` M-contiguous (per-token scales repeated per group; rows past M, if padded, scale zero rows of A)."""
    P, M = AS.shape[:2]
    s = AS.transpose(1, 2) if AS.dim() == 3 else AS[:, None, :].expand(P, G, M)
    if rows == M:
        return s.contiguous()
    out = AS.new_zeros(P, G, rows, dtype=torch.float32)
    out[:, :, :M] = s
    return out


def gemm(A: torch.Tensor, AS: torch.Tensor, bounds: list[int], out: torch.Tensor, unpack) -> torch.Tensor:
    """``out[:M]`` = the W4A8 GEMM of e4m3 codes ``A [P, M, K]`` (uint8) through ``torch._scaled_mm``;
    ``unpack()`` gives ``(w8, sb)``: ``w8 [N, K]`` with the zero folded in (uint8 e4m3 codes) and the weight scales
    fp32 as one contiguous ``[G, hi - lo]`` block per partition at ``G lo`` (one launch for both)."""
    P, M, K = A.shape
    G = K // GROUP
    rows = -(-M // 4) * 4  # cuBLASLt wants M % 4 == 0: zero rows in, their outputs dropped
    w8, sb = unpack()
    w8 = w8.view(torch.float8_e4m3fn)
    sa = activation_scales(AS, rows, G)
    for p in range(P):
        lo, hi = bounds[p], bounds[p + 1]
        a = A[p].view(torch.float8_e4m3fn)
        if rows != M:
            a = torch.cat([a.view(torch.uint8), a.new_zeros(rows - M, K, dtype=torch.uint8)]).view(a.dtype)
        args = (a, w8[lo:hi].t())
        kw = dict(scale_a=sa[p].t(), scale_b=sb[G * lo:G * hi].view(G, hi - lo), out_dtype=torch.bfloat16)
        if rows == M:
            torch._scaled_mm(*args, **kw, out=out[:M, lo:hi])
        else:
            out[:M, lo:hi] = torch._scaled_mm(*args, **kw)[:M]
    return out
