"""Profile target (GPU): ``rotate_quant`` at prefill M in named launch configs (Triton or Gluon), launched plain a few
times for a hardware profiler to attach to (``ncu --launch-skip``). Prints each launch's config; times nothing.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src \
      ncu --kernel-name regex:'rotate_quant|prologue' --launch-skip 2 --launch-count 1 \
      python3 tools/device/profile_rotate_quant.py --cfg gl128w16c --elem e4m3 --gran group
"""

import argparse

import torch

from radiance_bench.kernelbench.cases import activations
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.rotate_quant import triton as rq

p = argparse.ArgumentParser()
p.add_argument("--cfg", default="gl128w16c")
p.add_argument("--elem", default="e4m3", choices=("e4m3", "int8"))
p.add_argument("--gran", default="group", choices=("group", "token"))
p.add_argument("--m", type=int, default=8192)
p.add_argument("--k", type=int, default=5120)
p.add_argument("--p", type=int, default=1)
p.add_argument("--launches", type=int, default=4)
a = p.parse_args()
xs = [activations(a.m, a.k, seed=i) for i in range(2)]
rot = random_rotations(a.p, a.k, seed=a.p, device="cuda")
print(a, flush=True)
for i in range(a.launches):
    rq.rotate_quant(xs[i % 2], *rot, a.elem, a.gran, hw=True, cfg=a.cfg)
torch.cuda.synchronize()
