"""Profile target (GPU): each named projection's served decode GEMM at M tokens, launched plain (not in a graph) a
few times on DRAM-fed weight copies, for a hardware profiler to attach to (``ncu --launch-skip``): the tuned config,
reduced in the kernel. Prints each launch's config; times nothing.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src \
      ncu --kernel-name regex:mma --launch-skip 4 --launch-count 1 python3 tools/device/profile_decode.py \
      --proj mlp.gate_up --act int8 --m 8
"""

import argparse

import torch

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

p = argparse.ArgumentParser()
p.add_argument("--proj", nargs="+", default=["mlp.gate_up"])
p.add_argument("--act", default="int8", choices=("e4m3", "int8"))
p.add_argument("--m", type=int, default=8)
p.add_argument("--bits", type=int, default=4)
p.add_argument("--launches", type=int, default=6)
a = p.parse_args()
gpu = torch.cuda.get_device_name()
for proj in (q for q in projections(1) if q.name in a.proj):
    ws = [w4_weight(proj, a.bits, seed=i) for i in range(3)]  # 3 copies > L2 on every shape profiled
    x = activations(a.m, proj.K, seed=a.m)
    pres = [rotate_quant(x, wt, a.act) for wt in ws]
    name = tuned.pick(gpu, "w4a8_gemm", "decode", a.m, proj.N, proj.K, a.act, a.bits)
    print(proj.name, a.act, a.m, name, w4.config(a.m, proj.N, proj.K, "decode", False, w4.DECODE[name]), flush=True)
    for i in range(a.launches):
        wt, pre = ws[i % 3], pres[i % 3]
        w4.gemm(*pre, wt.w, wt.bounds, False, "decode", cfg=w4.DECODE[name])
    torch.cuda.synchronize()
