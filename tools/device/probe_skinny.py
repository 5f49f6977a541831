"""in_proj_ba's skinny GEMM: tile configs and the per-call counter memset, against cuBLAS bf16 (session 28).

``python probe_skinny.py OUT.json`` (PYTHONPATH: the kernels' and bench's src). Per N (96, 48: TP = 1, 2) and M
(1, 8, 16), over DRAM-fed weight copies in one CUDA graph each: cuBLAS ``x @ W.T``; our kernel on each
``(BN, KSLICE, num_warps)`` config; and the default config with a ``torch.zeros`` of its counters before each call —
the memset node every call had before the counters reset themselves (the ablation that times what it cost). Then
the 64-layer chained stack at M = 8 (int4, e4m3 and int8 per-group, deferred: ``chain``), its skinny GEMMs with that
memset and no programmatic launch ("memset": before session 28), without either ("none"), as programmatic
dependents ("pdl"), and as dependents loading their weight tiles before the wait ("pdl_early", session 29; the
default config's standalone row "default_early" too), A/B interleaved twice in one process.
"""

import sys
from functools import partial
from itertools import chain as then

import torch
from probe_rows import time_calls, write_rows

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.cases import activations
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.ops.skinny_gemm import triton as sk

K = 5120
CONFIGS = [(16, 256, 4), (16, 512, 4), (32, 512, 4), (16, 1024, 4), (32, 1024, 4), (16, 1024, 8), (64, 256, 4),
           (16, 128, 4)]


def _with_memset(x, w, gemm=sk.skinny_gemm):
    torch.zeros(-(-w.shape[0] // sk.BN), dtype=torch.int32, device=x.device)
    return gemm(x, w)


def rows():
    for N in (96, 48):
        ws = [torch.randn(N, K, device="cuda").to(torch.bfloat16) for _ in range(copies_needed(2 * N * K))]
        for M in (1, 8, 16):
            x = activations(M, K, seed=M)
            calls = {"cublas_bf16": [partial(torch.matmul, x, w.t()) for w in ws],
                     "memset_default": [partial(_with_memset, x, w) for w in ws]}
            calls |= {f"bn{bn}k{ks}w{nw}": [partial(sk.skinny_gemm, x, w, bn, ks, nw) for w in ws]
                      for bn, ks, nw in CONFIGS}
            calls["default_early"] = [partial(sk.skinny_gemm, x, w, early=True) for w in ws]
            yield time_calls({"N": N, "M": M, "K": K, "copies": len(ws)}, calls)


def stack_rows(M: int = 8, bits: int = 4):
    layers, nbytes = chain.build(M, bits)
    plain, pdl_on = sk.skinny_gemm, sk.programmatic_launch_on
    modes = {"memset": (partial(_with_memset, gemm=plain), False), "none": (plain, False), "pdl": (plain, True),
             "pdl_early": (partial(plain, early=True), True)}
    for ab in range(2):
        for elem in ("e4m3", "int8"):
            r = {"stack": f"chained int{bits} {elem} deferred", "M": M, "weight_bytes": nbytes, "ab": ab}
            for name, (gemm, pdl) in modes.items():
                sk.skinny_gemm = gemm  # the op's triton entry looks both up per call
                sk.programmatic_launch_on = pdl_on if pdl else (lambda device: False)
                with programmatic_launch(True):
                    t = graph_time([chain.step(layers, M, elem, True)], reps=5, min_calls=1)
                r[name + "_us"], r[name + "_median_us"] = t.best_us, t.median_us
            sk.skinny_gemm, sk.programmatic_launch_on = plain, pdl_on
            yield r


if __name__ == "__main__":
    write_rows(sys.argv[1], then(rows(), stack_rows()))
