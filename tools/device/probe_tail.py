"""Probe (GPU): the decode GEMM's fixed cost beside its weight stream. At M = 8, each projection's tuned config
(GEMM alone on quantised activations, a chain over enough weight copies to stream from DRAM, inside one CUDA graph)
with 4 split partials per L2 round trip against the same config with more in the split-order reduction (``rw`` 8, 16:
bit-identical, only the loads in flight change) and with half the splits; plus a K = 1024 GEMM of o_proj's N, whose
time is nearly all launch, ring fill and reduction. Writes ``$OUT/probe_tail.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_tail.py
"""

from dataclasses import replace
from functools import partial

import torch
from probe_out import record, save

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

M = 8
res = []
projs = [p for p in projections(1) if p.name in ("attn.o_proj", "gdn.out_proj", "mlp.down", "attn.qkv", "mlp.gate_up")]
tiny = next(p for p in projs if p.name == "attn.o_proj")
projs.append(replace(tiny, name="tiny (o_proj N, K = 1024)", K=1024))
for proj in projs:
    n = copies_needed(w4_weight(proj, 4, 0).nbytes)
    ws = [w4_weight(proj, 4, seed=i) for i in range(n)]
    x = activations(M, proj.K, seed=M)
    for act in ("e4m3", "int8"):
        pres = [rotate_quant(x, wt, act) for wt in ws]
        key = (proj.N, 6144 if proj is projs[-1] else proj.K)  # the tiny GEMM runs o_proj's config
        name = tuned.pick(torch.cuda.get_device_name(), "w4a8_gemm", "decode", M, *key, act, 4)
        base = w4.config(M, proj.N, proj.K, "decode", False, w4.DECODE[name])
        variants = {"rw4": {"rw": 4}, "rw8": {"rw": 8}, "rw16": {"rw": 16},
                    "half splits": {"splits": max(1, base["splits"] // 2), "rw": 4}}
        want = None
        for label, knobs in variants.items():
            cfg = {**w4.DECODE[name], **knobs}
            calls = [partial(w4.gemm, *pre, wt.w, wt.bounds, False, "decode", cfg=cfg)
                     for wt, pre in zip(ws, pres, strict=True)]
            out = calls[0]()
            want = out if want is None else want
            t = graph_time(calls)
            full = w4.config(M, proj.N, proj.K, "decode", False, cfg)
            row = dict(proj=proj.name, N=proj.N, K=proj.K, M=M, act=act, config=name, variant=label,
                       splits=full["splits"], rw=full["rw"], best_us=t.best_us, median_us=t.median_us,
                       same=torch.equal(out, want), weight_bytes=ws[0].nbytes)
            record(res, row)
    del ws
save("probe_tail", res, lambda r: f"{r['proj']:26s} {r['act']:5s} {r['config']:14s} {r['variant']:11s} "
     f"splits {r['splits']:2d} rw {r['rw']:2d} {r['best_us']:7.1f} us"
     f"{'' if r['same'] or r['variant'] == 'half splits' else '  DIFFERS'}")
