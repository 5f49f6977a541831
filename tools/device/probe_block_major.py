"""Probe (GPU): the weight words stored column-block-major. The ring kernel reads ``wq [K/8, N]`` through a 4-D TMA
view ``[N/64, K/8, 2, 32]`` (strides ``[64, N, 32, 1]``): each ring tile is 16 rows of 256 B at a row pitch of N x 4
B. Stored block-major (the same view made contiguous: strides ``[K/8 x 64, 64, 32, 1]``), a program's tiles are one
contiguous run of memory and the kernel is unchanged — only its descriptor's strides differ. ncu (call 120) found
52 % of gate_up's warps waiting on the ring's barrier for the next tile; this measures whether the layout moves it.

Each TP=1 projection's tuned decode config at M tokens (ring configs only), both layouts A/B interleaved in one
process: the GEMM alone in a CUDA graph over DRAM-fed weight copies, best of 15 replays, twice per layout; outputs
checked equal. Writes ``$OUT/probe_block_major.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir \
        python3 tools/device/probe_block_major.py [M ...]
"""

import sys

import torch
from probe_out import record, save
from triton.experimental.gluon import language as gl

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.w4a8_gemm import mma2, tma_tiles, tuned
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.shapes import projections

MS = [int(m) for m in sys.argv[1:]] or [8]
BLOCKS: dict[int, torch.Tensor] = {}  # wq.data_ptr() -> its words stored [N/64, K/8, 2, 32] contiguous
use_blocks = [False]
row_major = mma2.ring_descriptors


def ring_descriptors(a, wq, sz, BN, BM=16, wh=None):
    descs = row_major(a, wq, sz, BN, BM, wh)
    if not use_blocks[0]:
        return descs
    return (descs[0], tma_tiles.descriptor(BLOCKS[wq.data_ptr()], [BN // 64, 16, 2, 32], gl.int32), *descs[2:])


mma2.ring_descriptors = ring_descriptors  # triton.launch imports it at call time
gpu = torch.cuda.get_device_name()
res = []
for proj in (p for p in projections(1) if p.name != "gdn.in_proj_ba"):
    for bits in (4, 5):
        ws = [w4_weight(proj, bits, seed=i) for i in range(copies_needed(w4_weight(proj, bits, 0).nbytes))]
        BLOCKS.clear()
        for wt in ws:
            K8, N = wt.w.wq.shape
            BLOCKS[wt.w.wq.data_ptr()] = wt.w.wq.view(K8, N // 64, 2, 32).permute(1, 0, 2, 3).contiguous()
        for M in MS:
            x = activations(M, proj.K, seed=M)
            for act in ("e4m3", "int8"):
                name = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, act, bits)
                if not (name and w4.DECODE[name].get("ring")):
                    continue
                pres = [rotate_quant(x, wt, act) for wt in ws]
                cfg = w4.DECODE[name]
                calls = [lambda p=p, wt=wt, cfg=cfg: w4.gemm(*p, wt.w, wt.bounds, False, "decode", cfg=cfg)
                         for p, wt in zip(pres, ws, strict=True)]
                outs = {}
                for layout in ("rows", "blocks") * 2:
                    use_blocks[0] = layout == "blocks"
                    outs[layout] = calls[0]().clone()
                    t = graph_time(calls)
                    record(res, dict(proj=proj.name, bits=bits, act=act, M=M, config=name, layout=layout,
                                     best_us=t.best_us, median_us=t.median_us))
                res[-1]["same"] = torch.equal(outs["rows"], outs["blocks"])
        del ws
        BLOCKS.clear()
save("probe_block_major", res, lambda r: f"{r['proj']:18s} int{r['bits']} {r['act']:5s} M={r['M']:<2d} "
     f"{r['config']:15s} {r['layout']:6s} {r['best_us']:7.2f} us{'' if r.get('same', True) else '  DIFFERS'}")
