"""Format gates: the e4m3 codec over all 2^32 float32 bit patterns, and its code table."""

from __future__ import annotations

import torch

from gates.core import Row, fmt
from radiance_kernels.formats import e4m3


def _e4m3_exhaustive() -> list[Row]:
    # One thread, cache-sized chunks: ~80 s for the whole sweep beside a busy core, where two threads take 270-440 s
    # (every elementwise op waits for the thread the other process holds off its core).
    chunk = 1 << 16
    mismatches = 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for start in range(-(1 << 31), 1 << 31, chunk):
            x = torch.arange(start, start + chunk, dtype=torch.int32).view(torch.float32)
            mismatches += int((e4m3.encode(x) != e4m3.hw_encode_wrapped(x)).sum())
    finally:
        torch.set_num_threads(threads)
    return [Row("e4m3 encode == wrapped hw cast, all 2^32 inputs", f"{mismatches} mismatches", "0", mismatches == 0)]


def _e4m3_codes() -> list[Row]:
    codes = e4m3.all_finite_codes()
    dec = e4m3.decode(codes)
    hw = codes.view(torch.float8_e4m3fn).to(torch.float32)
    exact = int((dec != hw).sum())
    rt = int((e4m3.encode(dec) != torch.where(codes == 0x80, 0, codes)).sum())
    # nearest-value optimality: on midpoints +-1ulp between neighbours the encoder picks the nearer code
    pos = torch.sort(dec[dec >= 0].unique()).values.double()
    mid = (pos[1:] + pos[:-1]) / 2
    lo, hi = (mid * (1 - 1e-6)).float(), (mid * (1 + 1e-6)).float()
    bad = int((e4m3.decode(e4m3.encode(lo)).double() != pos[:-1]).sum())
    bad += int((e4m3.decode(e4m3.encode(hi)).double() != pos[1:]).sum())
    return [
        Row("e4m3 decode exact on 254 finite codes", f"{exact} differ", "0", exact == 0),
        Row("e4m3 256-code round trip", f"{rt} differ", "0", rt == 0),
        Row("e4m3 nearest-value optimality (midpoints ±1e-6)", f"{bad} wrong", "0", bad == 0),
    ]


def gates(ctx):
    yield "e4m3 codes", _e4m3_codes
    yield "e4m3 exhaustive", _e4m3_exhaustive


__all__ = ["gates", "fmt"]
