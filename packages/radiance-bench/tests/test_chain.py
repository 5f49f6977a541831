"""The chained decode stack (:mod:`radiance_bench.kernelbench.chain`) at toy shapes, through the Triton kernels under
the interpreter (a subprocess: ``TRITON_INTERPRET`` must be set before any kernel module is imported): deferring the
split reductions to the producers changes no bit of the step's output."""

import os
import subprocess
import sys

_RUN = """
import torch
from radiance_bench.kernelbench import chain
from radiance_kernels.shapes import Proj

TOY = (Proj("attn.qkv", 256, (256, 128, 128), 1, 1), Proj("attn.o_proj", 256, (256,), 1, 1),
       Proj("mlp.gate_up", 256, (256, 256), 1, 1), Proj("mlp.down", 256, (256,), 1, 1),
       Proj("gdn.in_proj_qkvz", 256, (384, 128), 1, 1), Proj("gdn.out_proj", 256, (256,), 1, 1),
       Proj("gdn.in_proj_ba", 256, (8,), 1, 1))
layers, nbytes = chain.build(3, 4, TOY, count=4, device="cpu")  # three GDN layers, one attention layer
assert [L.attn for L in layers] == [False, False, False, True] and nbytes > 0
for elem in ("e4m3", "int8"):
    served = chain.step(layers, 3, elem)()
    deferred = chain.step(layers, 3, elem, defer=True)()
    assert served[0].dtype == torch.bfloat16 and deferred[0].dim() == 3 and deferred[0].shape[0] > 1
    assert torch.isfinite(served[0].float()).all()
    assert chain.same_outputs(served, deferred), elem
    assert chain.same_outputs(chain.step(layers, 3, elem, deferred_configs=True)(), deferred), elem
    assert chain.same_outputs(served, chain.step(layers, 3, elem, True, overlap_skinny=True)()), elem
print("same")
"""


def test_deferred_chain_same_bits():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("same"), run.stderr[-3000:]
