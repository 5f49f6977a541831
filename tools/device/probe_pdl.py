"""Probe (GPU): whether programmatic dependent launch pays in a decode chain of served linears (the stream producer,
then the ring GEMM, over enough weight copies to stream from DRAM), per-linear time inside one CUDA graph. Each
variant sets whether the producers are launched as programmatic dependents (waiting for their predecessor at their
start), whether the GEMM lets the next launch start after its group loop, and whether the split add+RMSNorm's first
launch (the sum-of-squares partials) lets its main launch start as it starts. Outputs are checked equal to the plain
launches'. Session 15 added the GEMM launched as its producer's dependent with the producer not triggering (the
dependent grid starts as the producer's programs exit). Writes ``$OUT/probe_pdl.json``. (H200 call 73 ran this at
commit 75e9c4c, with further role sets: the GEMM launched as its producer's dependent — slower — and other trigger
points.)

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_pdl.py
"""

import torch
from probe_out import Roles, record, save

from radiance_bench.kernelbench.cases import producer_calls, w4_weight, w4a8_gemm
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.ops.w4a8_gemm import mma2
from radiance_kernels.shapes import projections

#: name: (producers wait, GEMM triggers, the split add+RMSNorm's partials launch triggers, the GEMM is launched as
#: its producer's programmatic dependent and waits at its start — the producer never triggers: its programs' exits do)
VARIANTS = {"none": (0, 0, 0, 0), "gemm->prod": (1, 1, 1, 0), "gemm->prod, partials no trigger": (1, 1, 0, 0),
            "prod waits only": (1, 0, 0, 0), "gemm triggers only": (0, 1, 0, 0),
            "gemm->prod, prod exit->gemm": (1, 1, 1, 1), "prod exit->gemm only": (0, 0, 0, 1)}
ORIG = {"prologue": st._prologue_kernel, "partials": st._ss_partials_kernel, "gemm": mma2._w4a8_mma2_kernel}


def use(variant: str) -> None:
    wait, trigger, partials, gemm_waits = map(bool, VARIANTS[variant])
    st._prologue_kernel = Roles(ORIG["prologue"], WAIT=wait, launch_pdl=wait)
    st._ss_partials_kernel = Roles(ORIG["partials"], WAIT=wait, TRIGGER=partials, launch_pdl=wait)
    mma2._w4a8_mma2_kernel = Roles(ORIG["gemm"], TRIGGER=trigger, WAIT=gemm_waits, launch_pdl=gemm_waits)


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
        use("none")
        want = [c() for c in served[:2]]
        for variant in VARIANTS:
            use(variant)
            same = all(torch.equal(g, w) for g, w in zip([c() for c in served[:2]], want, strict=True))
            t = graph_time(served)
            row = dict(proj=proj.name, elem=elem, M=M, variant=variant, roles=VARIANTS[variant], best_us=t.best_us,
                       median_us=t.median_us, same=same)
            record(res, row)
        use("none")
        del ws, prods, served
save("probe_pdl", res, lambda r: f"{r['proj']:16s} {r['elem']:5s} {r['variant']:31s} {r['best_us']:7.1f} us"
     f"{'' if r['same'] else '  DIFFERS'}")
