"""Reference ``rotate_quant``: ParoQuant rotation of the activations, then 8-bit quantisation.

Inputs: x [M, K] (bf16/fp16/fp32), per partition p < P the records pairs [P, krot, K] int16,
theta [P, krot, K/2] fp16, channel_scales [P, K] fp16. Per partition, xr = rotate(x) in fp32
(:func:`radiance_kernels.formats.rotation.rotate`), then with QMAX = 448 (e4m3) or 127 (int8):

- amax = max |xr| over the 128 channels of a group (``granularity="group"``) or over the whole row
  (``"token"``);
- scale AS = amax · fp32(1/QMAX)  (one fp32 multiply; 1/448 → 0x3B124925, 1/127 → 0x3C010204);
- q = xr / AS as a correctly rounded fp32 division; AS == 0 (an all-zero group/row, or an amax so
  small that AS underflows) gives q = 0 for every element;
- codes: e4m3 = :func:`radiance_kernels.formats.e4m3.encode` (RNE, saturating); int8 = round half
  to even, clamped to ±127;
- RS[p, m, g] = the sum of the decoded code values of group g (code domain, before AS), computed
  exactly (e4m3 values are multiples of 2⁻⁹) and rounded once to fp32.

Outputs: A [P, M, K] (uint8 e4m3 codes or int8), AS fp32 [P, M] (token) or [P, M, K/128] (group),
RS fp32 [P, M, K/128]. The dequantised activation is A·AS; the W4A8 GEMM uses
``out[m,n] = Σ_g s[g,n]·AS[m,g]·(Σ_{k∈g} a[m,k]·q[k,n] − z[g,n]·RS[m,g])``.
"""

from __future__ import annotations

import torch

from radiance_kernels.formats import e4m3
from radiance_kernels.formats.rotation import GROUP, rotate

ELEMS = ("e4m3", "int8")
GRANULARITIES = ("token", "group")
INV_QMAX = {"e4m3": float(torch.tensor(1 / 448.0, dtype=torch.float32)),
            "int8": float(torch.tensor(1 / 127.0, dtype=torch.float32))}
X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_records(pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, K: int) -> int:
    """Shape/dtype check of the stacked records (no data-dependent checks); returns P."""
    if pairs.dtype != torch.int16 or pairs.dim() != 3 or pairs.shape[-1] != K or not 1 <= pairs.shape[0] <= 3:
        raise ValueError(f"rotate_quant: pairs must be int16 [P<=3, krot, {K}], got {pairs.dtype} {list(pairs.shape)}")
    P, krot, _ = pairs.shape
    if theta.dtype != torch.float16 or list(theta.shape) != [P, krot, K // 2]:
        raise ValueError(f"rotate_quant: theta must be float16 [{P}, {krot}, {K // 2}], got "
                         f"{theta.dtype} {list(theta.shape)}")
    if channel_scales.dtype != torch.float16 or list(channel_scales.shape) != [P, K]:
        raise ValueError(f"rotate_quant: channel_scales must be float16 [{P}, {K}], got "
                         f"{channel_scales.dtype} {list(channel_scales.shape)}")
    return P


def check_quant(elem: str, granularity: str) -> None:
    if elem not in ELEMS:
        raise ValueError(f"rotate_quant: elem must be one of {ELEMS}, got {elem!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"rotate_quant: granularity must be one of {GRANULARITIES}, got {granularity!r}")


def check_activation(x: torch.Tensor, name: str) -> tuple[int, int]:
    if x.dtype not in X_DTYPES or x.dim() != 2 or x.shape[1] % GROUP or x.stride(1) != 1:
        raise ValueError(f"{name} must be a [M, K] bf16/fp16/fp32 tensor with unit channel stride and K a "
                         f"multiple of {GROUP}, got {x.dtype} {list(x.shape)} strides {x.stride()}")
    return x.shape[0], x.shape[1]


def check_args(x, pairs, theta, channel_scales, elem, granularity) -> tuple[int, int, int]:
    M, K = check_activation(x, "rotate_quant: x")
    P = check_records(pairs, theta, channel_scales, K)
    check_quant(elem, granularity)
    return P, M, K


def output_shapes(P: int, M: int, K: int, granularity: str) -> tuple[tuple, tuple, tuple]:
    G = K // GROUP
    return (P, M, K), ((P, M) if granularity == "token" else (P, M, G)), (P, M, G)


def code_dtype(elem: str) -> torch.dtype:
    return torch.uint8 if elem == "e4m3" else torch.int8


def quantize(xr: torch.Tensor, elem: str, granularity: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """xr [P, M, K] fp32 → (A, AS, RS) as in the module docstring."""
    P, M, K = xr.shape
    g = xr.reshape(P, M, K // GROUP, GROUP)
    amax = g.abs().amax(dim=-1)
    if granularity == "token":
        amax = amax.amax(dim=-1, keepdim=True).expand_as(amax)
    scale = amax * torch.tensor(INV_QMAX[elem], dtype=torch.float32, device=xr.device)
    live = (scale > 0)[..., None]
    q = torch.where(live, g / torch.where(live, scale[..., None], 1.0), 0.0)
    if elem == "e4m3":
        codes = e4m3.encode(q)
        fixed = (e4m3.decode(codes) * 512.0).to(torch.int32)  # exact: codes are multiples of 2^-9
        rs = fixed.sum(dim=-1).to(torch.float32) * (1.0 / 512.0)
    else:
        codes = torch.round(q).clamp(-127, 127).to(torch.int8)
        rs = codes.to(torch.int32).sum(dim=-1).to(torch.float32)
    a_scale = scale[..., 0].contiguous() if granularity == "token" else scale
    return codes.reshape(P, M, K), a_scale, rs


def rotate_all(x: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor) -> torch.Tensor:
    """[P, M, K] fp32: x rotated by each partition's records."""
    return torch.stack([rotate(x, pairs[p], theta[p], channel_scales[p]) for p in range(pairs.shape[0])])


def rotate_quant(x, pairs, theta, channel_scales, elem: str, granularity: str):
    check_args(x, pairs, theta, channel_scales, elem, granularity)
    return quantize(rotate_all(x, pairs, theta, channel_scales), elem, granularity)
