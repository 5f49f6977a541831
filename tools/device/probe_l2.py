"""Probe (GPU): whether a decode producer that asks L2 for its GEMM's first weight groups (before it waits for its
predecessor) shortens the served linear. Chains of (producer → tuned W4A8 GEMM) over enough weight copies to stream
from DRAM, inside one CUDA graph, per linear: the standalone rotate+quant and the fused stream producer of each
projection, prefetching 0 (none), 1 or 2 groups of every split ahead, or 16 bytes at the start of every split's range
(-1) or of every 2 MB of the weights (-2): the pages only, each twice (A/B/A/B). Outputs are checked equal to the
first setting's. Writes ``$OUT/probe_l2.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_l2.py
"""

import os

import torch
from probe_out import record, save

from radiance_bench.kernelbench.cases import PRODUCER_OF, activations, w4_weight, w4a8_gemm
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.ops.w4a8_gemm.triton import l2_prefetch_plan
from radiance_kernels.shapes import projections

AHEAD = [int(b) for b in os.environ.get("AHEAD", "0 1 -1 -2 0 1 -1 -2").split()]  # groups per split, repeated: A/B/A/B
if os.environ.get("L2_SLICED"):  # call 90's form: every program issues its slice of every range
    from l2_sliced import prefetch_regions_sliced

    st.prefetch_regions = prefetch_regions_sliced
MS = [int(m) for m in os.environ.get("PROBE_M", "1 8 16").split()]
ELEMS = os.environ.get("PROBE_ELEMS", "e4m3").split()
PROJS = os.environ.get("PROBE_PROJS", "").split()
BITS = [int(b) for b in os.environ.get("PROBE_BITS", "4").split()]


def plan_of(w, M, elem, ahead):
    """``ahead`` groups of every split; -1: 16 bytes of each split's first group; -2: 16 bytes of every 2 MB of the
    weight tensors (each page of a 2 MB-paged allocation); -3: ranges of no bytes (the issuing code alone)."""
    plan = l2_prefetch_plan(w, M, elem == "int8", max(ahead, 1))
    if ahead == -1:
        plan = tuple((t, stride, 16, total) for t, stride, _, total in plan[0]), plan[1]
    elif ahead == -3:  # no bytes: only the issuing loop runs
        plan = tuple((t, stride, 0, total) for t, stride, _, total in plan[0]), plan[1]
    elif ahead == -2:
        plan = tuple((t, 2 << 20, 16, total) for t, _, _, total in plan[0]), -(-plan[0][0][3] // (2 << 20))
    return plan


def chain(kind, ws, M, K, elem, ahead):
    """The producer → GEMM calls over the weight copies ``ws``."""
    calls = []
    for i, wt in enumerate(ws):
        x, y = activations(M, K, i), activations(M, K, i + 1)
        gw = activations(1, K, i + 2)[0]
        plan = plan_of(wt.w, M, elem, ahead)
        rot = (wt.pairs, wt.theta, wt.cs)

        def call(x=x, y=y, gw=gw, plan=plan, rot=rot, wt=wt):
            if kind == "rotate_quant":
                o = st.launch("none", x, rotation=rot, elem=elem, granularity="group", hw=True, prefetch=plan)
            elif kind == "add_rms_gemma":
                o = st.launch(kind, x, y, gw, 1e-6, rot, elem, "group", store_hs=True, hw=True, prefetch=plan)
            else:
                o = st.launch(kind, x, y, gw[:128] if kind == "gated_rms_norm" else None, 1e-6, rot, elem, "group",
                              hw=True, prefetch=plan)
            return w4a8_gemm(wt, o["A"], o["AS"], o["RS"])
        calls.append(call)
    return calls



def main() -> None:
    res = []
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba" or PROJS and proj.name not in PROJS:
            continue
        for bits in BITS:
            n = copies_needed(w4_weight(proj, bits, 0).nbytes)
            ws = [w4_weight(proj, bits, seed=i) for i in range(n)]
            for M in MS:
                for elem in ELEMS:
                    for kind in ("rotate_quant", PRODUCER_OF[proj.name]):
                        want = None
                        for ahead in AHEAD:
                            calls = chain(kind, ws, M, proj.K, elem, ahead)
                            got = [c() for c in calls[:2]]
                            want = want or got
                            t = graph_time(calls)
                            plan = plan_of(ws[0].w, M, elem, ahead)
                            row = dict(proj=proj.name, bits=bits, M=M, elem=elem, producer=kind, ahead=ahead,
                                       prefetch_MB=sum(r[2] for r in plan[0]) * plan[1] / 2**20 if plan else 0,
                                       best_us=t.best_us, median_us=t.median_us, weight_MB=ws[0].nbytes / 2**20,
                                       same=all(torch.equal(a, b) for a, b in zip(got, want, strict=True)))
                            record(res, row)
            del ws
    save("probe_l2", res, lambda r: f"{r['proj']:16s} int{r['bits']} M={r['M']:2d} {r['elem']:5s} {r['producer']:14s} "
         f"ahead {r['ahead']:2d} (issued {r['prefetch_MB']:5.1f} of {r['weight_MB']:5.1f}) {r['best_us']:7.1f} us"
         f"{'' if r['same'] else '  DIFFERS'}")


if __name__ == "__main__":
    main()
