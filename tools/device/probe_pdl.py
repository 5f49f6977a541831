"""Probe (GPU): which programmatic-dependent-launch roles pay in a decode chain of served linears (the stream
producer, then the ring GEMM, over enough weight copies to stream from DRAM), per-linear time inside one CUDA
graph. Each variant sets, for the producers and for the ring GEMM, whether they are launched as programmatic
dependents (and wait for their predecessor) and where they let the next launch start: the producer at its start;
the GEMM at its start (1), after its wait (2) or after its group loop (3). Outputs are checked equal to the plain
launches'. Writes ``$OUT/probe_pdl.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_pdl.py
"""

import json
import os

import torch

from radiance_bench.kernelbench.cases import producer_calls, w4_weight, w4a8_gemm
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.ops.w4a8_gemm import mma2
from radiance_kernels.shapes import projections

#: name: (producer waits, producer triggers, GEMM waits, GEMM trigger position)
VARIANTS = {"none": (0, 0, 0, 0), "all t2": (1, 1, 1, 2), "all t3": (1, 1, 1, 3), "all t1": (1, 1, 1, 1),
            "prod->gemm": (0, 1, 1, 0), "gemm t3->prod": (1, 0, 0, 3), "gemm t1->prod": (1, 0, 0, 1),
            "launch attr only": (1, 0, 1, 0)}
GEMM_ONLY = ("none", "all t1", "all t2", "all t3", "launch attr only")
ORIG = {"prologue": st._prologue_kernel, "partials": st._ss_partials_kernel, "gemm": mma2._w4a8_mma2_kernel}


class Roles:
    """A jitted kernel whose launches get ``kw`` over the launcher's own keywords."""

    def __init__(self, kernel, **kw):
        self.kernel, self.kw = kernel, kw

    def __getitem__(self, grid):
        run = self.kernel[grid]
        return lambda *a, **k: run(*a, **{**k, **self.kw})

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def use(variant: str) -> None:
    pw, pt, gw, gt = VARIANTS[variant]
    st._prologue_kernel = Roles(ORIG["prologue"], WAIT=bool(pw), TRIGGER=bool(pt), launch_pdl=bool(pw))
    st._ss_partials_kernel = Roles(ORIG["partials"], WAIT=bool(pw), TRIGGER=bool(pt), launch_pdl=bool(pw))
    mma2._w4a8_mma2_kernel = Roles(ORIG["gemm"], WAIT=bool(gw), TRIGGER=gt, launch_pdl=bool(gw))


res = []
M = 8
for proj in projections(1):
    if proj.name not in ("mlp.down", "mlp.gate_up", "gdn.out_proj", "attn.qkv"):
        continue
    for elem in ("e4m3", "int8") if proj.name == "mlp.down" else ("e4m3",):
        n = copies_needed(w4_weight(proj, 4, 0).nbytes)
        ws = [w4_weight(proj, 4, seed=i) for i in range(n)]
        prods = [producer_calls(proj.name, M, proj.K, i, w, elem)[0] for i, w in enumerate(ws)]
        served = [lambda f=f, w=w: w4a8_gemm(w, *f()) for f, w in zip(prods, ws, strict=True)]
        fixed = [f() for f in prods]
        gemms = [lambda a=a, w=w: w4a8_gemm(w, *a) for a, w in zip(fixed, ws, strict=True)]
        use("none")
        want = [c() for c in served[:2]]
        for chain, calls in (("served", served), ("gemm only", gemms)):
            for variant in VARIANTS:
                if chain == "gemm only" and variant not in GEMM_ONLY:
                    continue  # no producer in the chain: the GEMM roles only
                use(variant)
                got = [c() for c in calls[:2]]
                same = chain != "served" or all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
                t = graph_time(calls)
                row = dict(proj=proj.name, elem=elem, M=M, chain=chain, variant=variant, roles=VARIANTS[variant],
                           best_us=t.best_us, median_us=t.median_us, same=same)
                res.append(row)
                print(json.dumps(row), flush=True)
        use("none")
        del ws, prods, served, fixed, gemms
os.makedirs(os.environ["OUT"], exist_ok=True)
with open(os.path.join(os.environ["OUT"], "probe_pdl.json"), "w") as f:
    json.dump(res, f, indent=1)
for r in res:
    print(f"{r['proj']:16s} {r['elem']:5s} {r['chain']:9s} {r['variant']:17s} {r['best_us']:7.1f} us"
          f"{'' if r['same'] else '  DIFFERS'}")
