"""H200 probe (session 6): how fast can a decode GEMM's *access pattern* stream int4 weights, with no math?

The decode kernels read ``wq`` ([K/8, N] int32, column-contiguous rows) one 128-group at a time: per program a
``[16 rows, BN]`` tile per group, rows ``N * 4`` bytes apart, so DRAM sees ``BN * 4``-byte runs. This times a
read-only Triton loop over exactly that pattern (the GEMM's grid: N/BN tiles x splits of the groups), against the
same bytes laid out tile-contiguous (each group tile one ``16 * BN * 4``-byte run), and the device's read ceiling
(``Tensor.sum``) in the same run. If the strided pattern alone falls well short of the ceiling, the weight layout
limits decode; if it reaches it, the kernels' own loops do.
``python tools/device/probe_tile_stream.py OUT.json`` (GPU, PYTHONPATH as h200_run.sh sets it)."""

import json
import os
import sys

import torch
import triton
import triton.language as tl

from radiance_bench.kernelbench.ceilings import read_bandwidth
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.shapes import projections


@triton.jit
def _tile_read(w_ptr, out_ptr, N, G, groups_per_split, ROWS: tl.constexpr, BN: tl.constexpr,
               CONTIG: tl.constexpr):
    """XOR of every word a (tile, split) program of the decode grid reads; CONTIG: tile-contiguous layout."""
    t = tl.program_id(0)
    g_lo = tl.program_id(1) * groups_per_split
    g_hi = tl.minimum(g_lo + groups_per_split, G)
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BN)[None, :]
    if CONTIG:
        ptrs = w_ptr + t * G * ROWS * BN + r * BN + c
        step = ROWS * BN
    else:
        ptrs = w_ptr + r * N + t * BN + c
        step = ROWS * N
    acc = tl.zeros([ROWS, BN], tl.int32)
    for g in range(g_lo, g_hi):
        acc ^= tl.load(ptrs + g * step)
    tl.store(out_ptr + t * tl.num_programs(1) + tl.program_id(1), tl.reduce(tl.reduce(acc, 1, _xor), 0, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


def probe(name: str, N: int, K: int, BN: int, per_sm: int, warps: int, stages: int, contig: bool) -> dict:
    G = K // 128
    tiles = N // BN
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = max(1, min(G, -(-per_sm * sms // tiles)))
    gps = -(-G // splits)
    nbytes = N * K // 2
    ws = [torch.randint(-2**31, 2**31 - 1, (K // 8 * N,), dtype=torch.int32, device="cuda")
          for _ in range(copies_needed(nbytes))]
    out = torch.empty(tiles * splits, dtype=torch.int32, device="cuda")
    calls = [lambda w=w: _tile_read[(tiles, splits)](w, out, N, G, gps, ROWS=16, BN=BN, CONTIG=contig,
                                                      num_warps=warps, num_stages=stages) for w in ws]
    t = graph_time(calls)
    return {"proj": name, "N": N, "K": K, "BN": BN, "per_sm": per_sm, "num_warps": warps, "num_stages": stages,
            "contig": contig, "splits": splits, "best_us": t.best_us, "TBps": nbytes / t.best_us / 1e6}


def main(path: str) -> None:
    read = read_bandwidth()
    rows = []
    projs = {p.name: p for p in projections(tp=1)}
    for name in ("mlp.gate_up", "attn.o_proj", "mlp.down"):
        p = projs[name]
        for BN in (64, 128, 256, 512):
            for per_sm, warps, stages in ((2, 4, 3), (4, 4, 3), (8, 2, 3), (4, 4, 1)):
                for contig in (False, True):
                    r = probe(name, p.N, p.K, BN, per_sm, warps, stages, contig)
                    r["frac_read"] = r["TBps"] / read
                    rows.append(r)
                    print(f"{name:12s} BN={BN:4d} {per_sm}/SM w{warps} s{stages} {'tiled ' if contig else 'strided'}"
                          f" {r['best_us']:7.1f} us {r['TBps']:5.2f} TB/s = {r['frac_read']:.2f} of read", flush=True)
    tmp = path + ".tmp"  # written whole, then renamed: a cut run leaves no half file
    with open(tmp, "w") as f:
        json.dump({"read_TBps": read, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "triton": triton.__version__, "rows": rows}, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main(sys.argv[1])
