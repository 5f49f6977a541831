"""Probe (GPU): where the decode rotate+quant launch's time goes. Per-call times inside one CUDA graph (the
kernel plus its gap to the next node) of: a trivial copy of the same activations (the floor of any launch), the
producer with 1..8 Givens layers, and with fewer rows / warps per program (more, smaller programs); each variant's
bytes are checked equal to the default's. Writes ``$OUT/probe_producer.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir python3 tools/device/probe_producer.py
"""

import json
import os
from functools import partial

import torch
import triton
import triton.language as tl

from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.rotate_quant import triton as rq
from radiance_kernels.ops.stream import triton as st

st.CONFIGS.update(bm2w2=dict(BM=2, num_warps=2, scratch=True), bm1w1=dict(BM=1, num_warps=1, scratch=True))


@triton.jit
def _copy(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)


def copy(x, y):
    _copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)


res = []
for M, K in ((8, 5120), (8, 6144), (8, 17408), (1, 5120)):
    xs = [torch.randn(M, K, device="cuda").to(torch.bfloat16) for _ in range(8)]
    ys = [torch.empty_like(x) for x in xs]
    t = graph_time([partial(copy, x, y) for x, y in zip(xs, ys, strict=True)])
    res.append(dict(M=M, K=K, what="copy", us=t.best_us))
    for krot in (1, 2, 4, 8):
        rot = random_rotations(1, K, krot=krot, seed=1, device="cuda")
        for elem in ("e4m3", "int8"):
            ref = rq.rotate_quant(xs[0], *rot, elem, "group", hw=True, cfg="bm4w4")
            for cfg in ("bm4w4", "bm2w2", "bm1w1", "bm8w8") if krot == 8 else ("bm4w4",):
                try:
                    out = rq.rotate_quant(xs[0], *rot, elem, "group", hw=True, cfg=cfg)
                    same = all(torch.equal(out[k], ref[k]) for k in ref)
                    t = graph_time([partial(rq.rotate_quant, x, *rot, elem, "group", hw=True, cfg=cfg) for x in xs])
                    res.append(dict(M=M, K=K, krot=krot, elem=elem, cfg=cfg, same=same, us=t.best_us))
                except Exception as exc:  # noqa: BLE001 - a config that fails is recorded
                    res.append(dict(M=M, K=K, krot=krot, elem=elem, cfg=cfg, error=str(exc)[:200]))
                print(res[-1], flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "probe_producer.json"), "w") as f:
    json.dump(res, f, indent=1)
