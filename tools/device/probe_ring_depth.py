"""Probe (GPU): the ring's depth on the served decode picks. Each TP=1 projection's tuned decode config at M tokens
(ring configs only), its ring at the depths named, A/B interleaved in one process: the GEMM alone in a CUDA graph
over DRAM-fed weight copies, best of 15 replays, twice per depth; outputs checked equal across depths. ncu (call 120)
found gate_up's warps waiting on the ring's barrier for the next tile 52 % of the time, so a deeper ring is the
first thing to try on the swizzled tiles (session 8 measured depth 2 best on the unswizzled ones). Writes
``$OUT/probe_ring_depth.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir \
        python3 tools/device/probe_ring_depth.py [M] [depth ...]
"""

import sys

import torch
from probe_out import record, save

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

M = int(sys.argv[1]) if len(sys.argv) > 1 else 8
DEPTHS = [int(d) for d in sys.argv[2:]] or [2, 3, 4]
gpu = torch.cuda.get_device_name()
res = []
for proj in (p for p in projections(1) if p.name != "gdn.in_proj_ba"):
    ws = [w4_weight(proj, 4, seed=i) for i in range(copies_needed(w4_weight(proj, 4, 0).nbytes))]
    x = activations(M, proj.K, seed=M)
    for act in ("e4m3", "int8"):
        name = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, act, 4)
        if not (name and w4.DECODE[name].get("ring")):
            continue
        pres = [rotate_quant(x, wt, act) for wt in ws]
        outs = {}
        for depth in DEPTHS * 2:
            cfg = {**w4.DECODE[name], "ring": depth}
            calls = [lambda p=p, wt=wt, c=cfg: w4.gemm(*p, wt.w, wt.bounds, False, "decode", cfg=c)
                     for p, wt in zip(pres, ws, strict=True)]
            outs[depth] = calls[0]().clone()
            t = graph_time(calls)
            record(res, dict(proj=proj.name, act=act, M=M, config=name, ring=depth, best_us=t.best_us,
                             median_us=t.median_us))
        res[-1]["same"] = all(torch.equal(outs[DEPTHS[0]], o) for o in outs.values())
    del ws
save("probe_ring_depth", res, lambda r: f"{r['proj']:18s} {r['act']:5s} M={r['M']} {r['config']:15s} ring {r['ring']} "
     f"{r['best_us']:7.2f} us{'' if r.get('same', True) else '  DIFFERS'}")
