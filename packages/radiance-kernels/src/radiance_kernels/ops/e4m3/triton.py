"""Elementwise e4m3 encode/decode kernels (exercise :mod:`radiance_kernels.tl.e4m3`)."""

import torch
import triton
import triton.language as tl

from radiance_kernels.tl.e4m3 import e4m3_decode, e4m3_encode

BLOCK = 1024


@triton.jit
def _encode_kernel(x_ptr, out_ptr, n, HW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, e4m3_encode(x, HW).to(tl.uint8), mask=mask)


@triton.jit
def _decode_kernel(c_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = tl.load(c_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, e4m3_decode(c), mask=mask)


def encode(x: torch.Tensor, hw: bool = False) -> torch.Tensor:
    x = x.to(torch.float32).contiguous()
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    n = x.numel()
    _encode_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, HW=hw, BLOCK=BLOCK)
    return out


def decode(codes: torch.Tensor) -> torch.Tensor:
    codes = codes.contiguous()
    out = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    n = codes.numel()
    _decode_kernel[(triton.cdiv(n, BLOCK),)](codes, out, n, BLOCK=BLOCK)
    return out
