"""Probe (GPU): a decode GEMM and the producer that reads its output, reduced in the GEMM or deferred to the
producer, at several split counts. The tuned split counts were chosen with the reduction inside the GEMM; deferred,
a split costs the GEMM only its partial's store and the producer one more L2 load per element, so the best count may
move. Pairs at M = 8 (e4m3 per-group): o_proj → add+RMSNorm (gate_up's rotate+quant), gate_up → silu·mul (down's),
down → add+RMSNorm (qkv's). Each row: the pair over DRAM-fed weight copies inside one CUDA graph, PDL on. Writes
``$OUT/probe_defer_splits.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir \
        python3 tools/device/probe_defer_splits.py
"""

from functools import partial

import torch
from probe_out import record, save

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.pairs import PAIRS, consumer, pair
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

M = 8
P = {p.name: p for p in projections(1)}


res = []
for name, producer, p_next in PAIRS:
    proj = P[name]
    ws = [w4_weight(proj, 4, seed=i) for i in range(copies_needed(w4_weight(proj, 4, 0).nbytes))]
    x = activations(M, proj.K, seed=M)
    pres = [rotate_quant(x, wt) for wt in ws]
    consume = consumer(producer, M, proj.N // 2 if producer == "silu_mul" else proj.N, p_next, "e4m3")
    cfg_name = tuned.pick(torch.cuda.get_device_name(), "w4a8_gemm", "decode", M, proj.N, proj.K, "e4m3", 4)
    s0 = w4.config(M, proj.N, proj.K, "decode", False, w4.DECODE[cfg_name])["splits"]
    G = proj.K // 128
    for s in sorted({max(1, s0 // 2), s0, min(G, s0 * 3 // 2), min(G, 2 * s0), min(G, 3 * s0)}):
        cfg = {**w4.DECODE[cfg_name], "splits": s}
        for defer in (False, True):
            calls = [partial(pair, consume, wt, pre, cfg, defer) for wt, pre in zip(ws, pres, strict=True)]
            with programmatic_launch(True):
                t = graph_time(calls)
            full = w4.config(M, proj.N, proj.K, "decode", False, cfg)
            record(res, dict(gemm=name, producer=producer, M=M, config=cfg_name, tuned_splits=s0,
                             splits=full["splits"], deferred=defer, best_us=t.best_us, median_us=t.median_us))
    del ws
save("probe_defer_splits", res, lambda r: f"{r['gemm']:12s} → {r['producer']:13s} {r['config']:14s} splits "
     f"{r['splits']:2d} (tuned {r['tuned_splits']:2d}) {'deferred' if r['deferred'] else 'reduced ':8s} "
     f"{r['best_us']:7.2f} us")
