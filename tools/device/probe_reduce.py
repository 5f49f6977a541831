"""Probe (GPU): what the decode GEMM's split-K reduction costs, and the split count of o_proj's shape at M = 16.

- "splits": o_proj / out_proj's shape (N 5120, K 6144) at M = 16, e4m3 and int8 per-group activations: the swap-AB
  and 16-token ring configs at split counts 4-24, the GEMM alone and the served linear (rotate+quant launch + the
  GEMM), with cuBLAS bf16 in the same process — the two peer rows the served linear still loses by ~1 %.
- "reduce": each decode shape's tuned config at M = 8 and 16 against the same launch with the reduction left out
  (``defer``: partials stored, no arrival count, no split-order sum — H200 call 100 ran it as the ablation
  "noreduce", commit 2d5cdde, the same kernel path).
- "floor": o_proj's N at K = 128 and 1024 (launch, ring fill and reduction nearly all of it), with and without.
- "chain": the 64-layer chain of W4A8 GEMMs alone at M = 8 (e4m3; the stack section's "gemm only"), tuned against
  deferred: the most a reduction moved out of the GEMM (into the next producer) can save there.

Every row is a chain over enough weight copies to stream from DRAM, timed inside one CUDA graph. Writes
``$OUT/probe_reduce.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_reduce.py
"""

import sys
from dataclasses import replace
from functools import partial

import torch
from probe_out import record, save

from radiance_bench.kernelbench import peers
from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

PARTS = sys.argv[1:] or ["splits", "reduce", "floor", "chain"]
SWEEP = {"e4m3": ("mma2n64t2so12", "mma2n64t2s", "mma2t2s"), "int8": ("mma8n64t2so12", "mma8n64t2s", "mma8t2s")}
SPLITS = (None, 4, 6, 8, 12, 16, 24)
res = []
gpu = torch.cuda.get_device_name()
projs = {p.name: p for p in projections(1)}


def weights(proj):
    return [w4_weight(proj, 4, seed=i) for i in range(copies_needed(w4_weight(proj, 4, 0).nbytes))]


def timed(ws, pres, cfg, x=None, act="e4m3", defer=False):
    """The GEMM alone on ``pres`` (or, given ``x``, the served linear: its rotate+quant launch first)."""
    if x is None:
        calls = [partial(w4.gemm, *pre, wt.w, wt.bounds, False, "decode", cfg=cfg, defer=defer)
                 for wt, pre in zip(ws, pres, strict=True)]
    else:
        calls = [lambda wt=wt: w4.gemm(*rotate_quant(x, wt, act), wt.w, wt.bounds, False, "decode", cfg=cfg)
                 for wt in ws]
    return graph_time(calls)


def row(part, proj, M, act, name, variant, cfg, t, **more):
    full = w4.config(M, proj.N, proj.K, "decode", False, cfg)
    record(res, dict(part=part, proj=proj.name, N=proj.N, K=proj.K, M=M, act=act, config=name, variant=variant,
                     splits=full["splits"], best_us=t.best_us, median_us=t.median_us, **more))


if "splits" in PARTS:
    proj, M = projs["attn.o_proj"], 16
    ws = weights(proj)
    x = activations(M, proj.K, seed=M)
    t = graph_time([peers.cublas_bf16(M, proj.N, proj.K, i)[0] for i in range(copies_needed(proj.N * proj.K * 2))])
    record(res, dict(part="splits", proj=proj.name, N=proj.N, K=proj.K, M=M, act="bf16", config="cuBLAS bf16",
                     variant="peer", splits=1, best_us=t.best_us, median_us=t.median_us))
    for act, names in SWEEP.items():
        pres = [rotate_quant(x, wt, act) for wt in ws]
        want = w4.gemm(*pres[0], ws[0].w, ws[0].bounds, False, "decode", cfg=w4.DECODE[names[0]])
        for name in names:
            for s in SPLITS:
                cfg = {**w4.DECODE[name], **({} if s is None else {"splits": s})}
                same = torch.equal(w4.gemm(*pres[0], ws[0].w, ws[0].bounds, False, "decode", cfg=cfg), want)
                label = "default" if s is None else f"splits {s}"
                row("splits", proj, M, act, name, f"gemm {label}", cfg, timed(ws, pres, cfg), same=same)
                row("splits", proj, M, act, name, f"linear {label}", cfg, timed(ws, pres, cfg, x, act))
    del ws

if "reduce" in PARTS:
    for pname in ("attn.qkv", "attn.o_proj", "mlp.gate_up", "mlp.down", "gdn.in_proj_qkvz"):
        proj = projs[pname]
        ws = weights(proj)
        for M in (8, 16):
            x = activations(M, proj.K, seed=M)
            for act in ("e4m3", "int8"):
                pres = [rotate_quant(x, wt, act) for wt in ws]
                name = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, act, 4)
                for variant in ("none", "deferred"):
                    cfg = w4.DECODE[name]
                    row("reduce", proj, M, act, name, variant, cfg, timed(ws, pres, cfg, defer=variant != "none"))
        del ws

if "floor" in PARTS:
    M = 8
    for K in (128, 1024):
        proj = replace(projs["attn.o_proj"], name=f"o_proj N, K = {K}", K=K)
        ws = weights(proj)
        x = activations(M, K, seed=M)
        pres = [rotate_quant(x, wt) for wt in ws]
        name = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, 6144, "e4m3", 4)  # o_proj's config
        for s in sorted({1, min(4, K // 128), min(8, K // 128)}):
            for variant in ("none", "deferred") if s > 1 else ("none",):
                cfg = {**w4.DECODE[name], "splits": s}
                row("floor", proj, M, "e4m3", name, variant, cfg, timed(ws, pres, cfg, defer=variant != "none"))
        del ws

if "chain" in PARTS:
    M = 8
    chain = {"none": [], "deferred": []}
    nbytes = 0
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba":
            continue
        name = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, "e4m3", 4)
        for layer in range(proj.count):
            wt = w4_weight(proj, 4, seed=layer)
            pre = rotate_quant(activations(M, proj.K, layer), wt)
            nbytes += wt.nbytes
            for variant, calls in chain.items():
                calls.append(partial(w4.gemm, *pre, wt.w, wt.bounds, False, "decode", cfg=w4.DECODE[name],
                                     defer=variant != "none"))
    for variant, calls in chain.items():
        t = graph_time([lambda calls=calls: [c() for c in calls]], reps=5, min_calls=1)
        record(res, dict(part="chain", proj="64 layers", M=M, act="e4m3", config="tuned", variant=variant,
                         launches=len(calls), weight_bytes=nbytes, best_us=t.best_us, median_us=t.median_us))

save("probe_reduce", res, lambda r: f"{r['part']:6s} {r['proj']:18s} M {r['M']:2d} {r['act']:5s} {r['config']:14s} "
     f"{r['variant']:18s} splits {r.get('splits', '-')!s:>3s} {r['best_us']:9.1f} us"
     f"{'' if r.get('same', True) else '  DIFFERS'}")
