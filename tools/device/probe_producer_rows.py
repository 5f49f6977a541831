"""Decode producer launch configs side by side: standalone and as the 64-layer stack's default (sessions 28, 29).

``python probe_producer_rows.py OUT.json [CFG ...]`` (PYTHONPATH: the kernels' and bench's src). CFG names configs of
``stream.triton.CONFIGS`` or the probe's own ``bm{2,4,8}w1``; the first is the baseline. Without CFG: session 28's
rows — the decode default ``bm1w1`` runs one row per one-warp program, each loading its partition's Givens tables (8
layers x 128 x (partner, cos, sin)) for one row of 128 channels; ``bm{2,4,8}w1`` (added here, not in the library)
share each load over 2-8 rows in the same warp. Session 29: ``bm1w1 bm1w1e bm1w1p`` (the one-group programs' constants
before their wait, in registers / prefetched to the L2). Per producer (rotate_quant, the fused add+RMSNorm, silu-mul;
e4m3 per-group), P = 1, 3 and M = 1, 8, 16 (K = 5120): each config's bytes against the baseline's, and its time over
8 input copies in a CUDA graph (programmatic launch on; one rotation record, so its tables sit in the L2 — the stack
rows are where they come from DRAM). Then the 64-layer chained int4 stack at M = 8 (deferred, e4m3 and int8
per-group) with each config as the decode default, A/B twice in one process.
"""

import os
import sys
from functools import partial
from itertools import chain as then

import torch
from probe_rows import time_calls, write_rows

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.cases import activations
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.stream import triton as st

ROWS = {f"bm{b}w1": dict(BM=b, num_warps=1, scratch=True) for b in (2, 4, 8)}
st.CONFIGS.update(ROWS)
CFGS = sys.argv[2:] or ["bm1w1", *ROWS]
K = 5120


def _call(producer, xs, ys, w, recs, cfg, i):
    b = None if producer == "none" else ys[i]
    return st.launch(producer, xs[i], b, w, 1e-6, rotation=recs, elem="e4m3", granularity="group",
                     store_hs=producer.startswith("add_rms"), hw=True, cfg=cfg)


def rows():
    w = activations(1, K, seed=99)[0]
    for producer in ("none", "add_rms_gemma", "silu_mul"):
        for P in (1, 3):
            recs = random_rotations(P, K, seed=P, device="cuda")
            for M in (1, 8, 16):
                xs = [activations(M, K, seed=10 * M + i) for i in range(8)]
                ys = [activations(M, K, seed=10 * M + i + 100) for i in range(8)]
                ref = _call(producer, xs, ys, w, recs, CFGS[0], 0)
                r = {"producer": producer, "P": P, "M": M, "K": K}
                for cfg in CFGS:
                    got = _call(producer, xs, ys, w, recs, cfg, 0)
                    r[cfg + "_same"] = all(torch.equal(got[k].view(torch.uint8), ref[k].view(torch.uint8)) for k in ref)
                with programmatic_launch(True):
                    yield time_calls(r, {cfg: [partial(_call, producer, xs, ys, w, recs, cfg, i) for i in range(8)]
                                         for cfg in CFGS})


def stack_rows(M: int = 8, bits: int = 4):
    layers, nbytes = chain.build(M, bits)
    default = st.SMALL_M_DEFAULT
    for ab in range(2):
        for elem in ("e4m3", "int8"):
            r = {"stack": f"chained int{bits} {elem} deferred", "M": M, "weight_bytes": nbytes, "ab": ab}
            for cfg in CFGS:
                st.SMALL_M_DEFAULT = cfg  # default_config reads it per call
                with programmatic_launch(True):
                    t = graph_time([chain.step(layers, M, elem, True)], reps=5, min_calls=1)
                r[cfg + "_us"], r[cfg + "_median_us"] = t.best_us, t.median_us
            st.SMALL_M_DEFAULT = default
            yield r


if __name__ == "__main__":
    stack_m = [int(m) for m in os.environ.get("STACK_M", "8").split()]
    write_rows(sys.argv[1], then(rows() if os.environ.get("ROWS", "1") == "1" else (),
                                 *(stack_rows(m) for m in stack_m)))
