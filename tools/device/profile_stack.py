"""Where the chained 64-layer decode step spends its time (GPU): one CUDA-graph replay of :mod:`chain`'s step at
M = 8, traced by the profiler (CUPTI kernel records: each launch's first-program start and last-program end), every
launch named by its role in the layer. Per role, summed over the layers: the **exposed** time — the launch's end
minus the end of the launch before it, so the exposed times add up to the step — the duration (programmatic
dependents start before the launch ahead of them ends: their duration includes the wait) and, for the GEMMs, the
weight-stream limit of their bytes at the read ceiling. Writes ``profile_stack.json`` (every launch and the role
table) and prints the table; the step untraced (best of 5 graph replays) beside it.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src python3 tools/device/profile_stack.py \
        OUT.json [bits ...]
"""

import json
import os
import sys
import tempfile
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.ceilings import read_bandwidth
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.backends import programmatic_launch

M = 8
#: each layer's launches in :func:`chain.step`'s order: role, kernel name fragment, weight key (GEMMs)
GDN = [("norm1 partials", "_ss_partials", None), ("norm1+rq", "_prologue", None),
       ("in_proj_qkvz", "_w4a8_", "in_proj_qkvz"), ("in_proj_ba", "_skinny", "ba"),
       ("gated_rms+rq", "_prologue", None), ("out_proj", "_w4a8_", "out_proj"),
       ("norm2 partials", "_ss_partials", None), ("norm2+rq", "_prologue", None), ("gate_up", "_w4a8_", "gate_up"),
       ("silu_mul+rq", "_prologue", None), ("down", "_w4a8_", "down")]
ATTN = [("norm1 partials", "_ss_partials", None), ("norm1+rq", "_prologue", None), ("qkv", "_w4a8_", "qkv"),
        ("sigmoid_gate+rq", "_prologue", None), ("o_proj", "_w4a8_", "o_proj"), *GDN[6:]]


def kernels(run) -> list[dict]:
    """One graph replay of ``run``, its kernel records in start order (µs, relative to the first)."""
    graph = torch.cuda.CUDAGraph()
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        run()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(os.path.join(d, "t.json"))
        with open(os.path.join(d, "t.json")) as f:
            events = json.load(f)["traceEvents"]
    ks = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    t0 = ks[0]["ts"]
    return [dict(name=e["name"], start=e["ts"] - t0, end=e["ts"] + e["dur"] - t0) for e in ks]


def roles(layers, ks: list[dict], bw: float) -> list[dict]:
    """``ks`` named by role, in order (a launch that is none of the step's, e.g. the residual's zero fill, is
    "other"); per role the summed exposed time (its end minus the latest end before it), idle gap before its start,
    duration and weight-stream limit."""
    expected = [r for L in layers for r in (ATTN if L.attn else GDN)]
    limit = defaultdict(float)
    for L in layers:
        for key, wt in L.w.items():
            limit[key] += wt.nbytes / bw * 1e6
        if L.ba is not None:
            limit["ba"] += L.ba.numel() * 2 / bw * 1e6
    agg = defaultdict(lambda: dict(launches=0, exposed_us=0.0, gap_us=0.0, duration_us=0.0))
    prev_end, i = 0.0, 0
    for k in ks:
        role, frag, key = expected[i] if i < len(expected) else ("other", "", None)
        if frag and frag in k["name"]:
            i += 1
        else:
            role, key = "other", None
        a = agg[role]
        a["launches"] += 1
        a["exposed_us"] += k["end"] - prev_end
        a["gap_us"] += max(0.0, k["start"] - prev_end)
        a["duration_us"] += k["end"] - k["start"]
        prev_end = max(prev_end, k["end"])
        k["role"] = role
        if key:
            a["limit_us"] = limit[key]
    if i != len(expected):
        raise RuntimeError(f"the trace matched {i} of the step's {len(expected)} launches: "
                           f"{[k['name'] for k in ks[:14]]}")
    return [dict(role=r, **a) for r, a in agg.items()]


def main(out: str, bits_list: list[int]) -> None:
    bw = read_bandwidth() * 1e12
    res = dict(read_TBps=bw / 1e12, runs=[])
    for bits in bits_list:
        layers, nbytes = chain.build(M, bits)
        for elem in ("e4m3", "int8"):
            run = chain.step(layers, M, elem, defer=True)
            with programmatic_launch(True):
                ks = kernels(run)
                untraced = graph_time([run], reps=5, min_calls=1).best_us
            table = roles(layers, ks, bw)
            step = ks[-1]["end"]
            res["runs"].append(dict(bits=bits, elem=elem, step_us=step, untraced_us=untraced,
                                    limit_us=nbytes / bw * 1e6, roles=table, kernels=ks))
            print(f"int{bits} {elem} deferred: step {step:.1f} us traced ({untraced:.1f} untraced), weight-stream "
                  f"limit {nbytes / bw * 1e6:.1f} us")
            print(f"  {'role':18s} {'n':>3s} {'exposed':>9s} {'gap':>7s} {'duration':>9s} {'limit':>8s} "
                  f"{'exp/lim':>7s}")
            for r in table:
                lim = r.get("limit_us")
                print(f"  {r['role']:18s} {r['launches']:3d} {r['exposed_us']:9.1f} {r['gap_us']:7.1f} "
                      f"{r['duration_us']:9.1f} {lim or 0:8.1f} {r['exposed_us'] / lim if lim else float('nan'):7.2f}")
        del layers
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], [int(b) for b in sys.argv[2:]] or [4])
