"""The producers' L2 prefetch of their GEMM's first weight tiles, A/B on the chained 64-layer stack (session 36).

``python probe_l2_prefetch.py OUT.json [MB ...]`` (PYTHONPATH: the kernels' and bench's src; env ``STACK_M``,
default "8", ``BITS``, default "4"). Between two GEMMs' weight streams DRAM idles for the producer's few µs; each
producer here first pulls ``MB`` of its GEMM's first groups (every split's) into the L2
(:func:`radiance_kernels.ops.w4a8_gemm.triton.l2_prefetch_plan`). The chained deferred step as served (skinny overlap)
at each budget (the first is the baseline, default 0 = no prefetch), e4m3 and int8 per-group, in one process, A/B
twice, each budget's outputs checked bit for bit against the baseline's.
"""

import os
import sys

import torch
from probe_rows import write_rows

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.backends import programmatic_launch

BUDGETS = [float(b) for b in sys.argv[2:]] or [0, 2, 4, 8, 16]


def stack_rows(M: int, bits: int):
    layers, nbytes = chain.build(M, bits)
    for ab in range(2):
        for elem in ("e4m3", "int8"):
            r = {"stack": f"chained int{bits} {elem} deferred skinny-overlap", "M": M, "weight_bytes": nbytes,
                 "ab": ab}
            with programmatic_launch(True):
                runs = {mb: chain.step(layers, M, elem, True, overlap_skinny=True, l2_prefetch_mb=mb)
                        for mb in BUDGETS}
                if ab == 0:
                    want = runs[BUDGETS[0]]()
                    for mb, run in runs.items():
                        got = run()
                        r[f"{mb:g}MB_same"] = all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
                for mb, run in runs.items():
                    t = graph_time([run], reps=5, min_calls=1)
                    r[f"{mb:g}MB_us"], r[f"{mb:g}MB_median_us"] = t.best_us, t.median_us
            yield r
    del layers


if __name__ == "__main__":
    write_rows(sys.argv[1], (r for m in os.environ.get("STACK_M", "8").split()
                             for b in os.environ.get("BITS", "4").split() for r in stack_rows(int(m), int(b))))
