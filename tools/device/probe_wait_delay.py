"""Probe (GPU): whether a decode producer that sleeps before it waits for its predecessor (``nanosleep`` before
``griddepcontrol.wait``) changes the served linear's time — H200 call 90 saw producers that ran a short loop there
(an L2 prefetch plan with most of its issues predicated off) up to 1 us faster, call 91 (the same prefetches dealt
round-robin, almost no loop) not. Chains of (producer → tuned W4A8 GEMM) over DRAM-fed weight copies in one CUDA
graph, per linear, delays 0 / 500 / 1000 / 2000 ns, each twice (A/B/A/B). Writes ``$OUT/probe_wait_delay.json``.

    cd tools/device && PYTHONPATH=../../packages/radiance-kernels/src:../../packages/radiance-bench/src OUT=dir \
        python3 probe_wait_delay.py
"""

import os

import torch
from probe_l2 import chain
from probe_out import record, save
from probe_pdl import Roles

from radiance_bench.kernelbench.cases import PRODUCER_OF, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.shapes import projections

DELAYS = [int(d) for d in os.environ.get("DELAYS", "0 500 1000 2000 0 500 1000 2000").split()]
MS = [int(m) for m in os.environ.get("PROBE_M", "8 16").split()]
ORIG = {"prologue": st._prologue_kernel, "partials": st._ss_partials_kernel}


def use(delay: int) -> None:
    st._prologue_kernel = Roles(ORIG["prologue"], DELAY=delay)
    st._ss_partials_kernel = Roles(ORIG["partials"], DELAY=delay)



def main() -> None:
    res = []
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba":
            continue
        n = copies_needed(w4_weight(proj, 4, 0).nbytes)
        ws = [w4_weight(proj, 4, seed=i) for i in range(n)]
        for M in MS:
            for kind in ("rotate_quant", PRODUCER_OF[proj.name]):
                calls = chain(kind, ws, M, proj.K, "e4m3", 0)
                want = None
                for delay in DELAYS:
                    use(delay)
                    got = [c() for c in calls[:2]]
                    want = want or got
                    t = graph_time(calls)
                    record(res, dict(proj=proj.name, M=M, producer=kind, delay_ns=delay, best_us=t.best_us,
                                     median_us=t.median_us,
                                     same=all(torch.equal(a, b) for a, b in zip(got, want, strict=True))))
        del ws
    use(0)
    save("probe_wait_delay", res, lambda r: f"{r['proj']:16s} M={r['M']:2d} {r['producer']:14s} delay "
         f"{r['delay_ns']:4d} ns {r['best_us']:7.1f} us{'' if r['same'] else '  DIFFERS'}")


if __name__ == "__main__":
    main()
