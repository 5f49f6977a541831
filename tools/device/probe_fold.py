"""add+RMSNorm's sum of squares folded in its own launch (``SYNC``) against the two-launch split (session 28).

``python probe_fold.py OUT.json`` (PYTHONPATH: the kernels' and bench's src). Per add+RMSNorm projection of the TP=1
shapes (qkv P = 3, in_proj_qkvz / gate_up P = 2) and M = 1, 8, 16: the fused producer alone (e4m3 per-group, in a
CUDA graph), the plain add+RMSNorm too, with the fold in the launch where :func:`fold_in_launch` allows ("sync") and
forced off ("split": its partials by a first launch); ``sync_ran`` says whether the grid allowed it. Then the
64-layer chained int4 stack at M = 8 (deferred, e4m3 and int8 per-group), the same two ways, A/B twice in one process.
"""

import sys
from itertools import chain as then

from probe_rows import time_calls, write_rows

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.cases import PRODUCER_OF, producer_calls, w4_weight
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.formats.rotation import GROUP
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.shapes import projections

SYNC = st.fold_in_launch


def _off(*args):
    return "forced off (probe)"


def _timed(row: dict, calls: dict, **graph) -> dict:
    """Each call list timed with the fold in the launch and forced off, under programmatic launch."""
    for mode, fn in (("sync", SYNC), ("split", _off)):
        st.fold_in_launch = fn
        with programmatic_launch(True):
            time_calls(row, {f"{name}_{mode}": c for name, c in calls.items()}, **graph)
    st.fold_in_launch = SYNC
    return row


def rows():
    import torch

    dev = torch.device("cuda")
    for proj in (p for p in projections(1) if PRODUCER_OF.get(p.name, "").startswith("add_rms")):
        wt = w4_weight(proj, 4, 0)
        for M in (1, 8, 16):
            fused, plain = producer_calls(proj.name, M, proj.K, M, wt)
            r = {"proj": proj.name, "P": proj.P, "M": M, "K": proj.K,
                 "sync_ran": SYNC(dev, proj.P * M * (proj.K // GROUP), 1) is None}
            yield _timed(r, {"fused": [fused], "plain": [plain]})


def stack_rows(M: int = 8, bits: int = 4):
    layers, nbytes = chain.build(M, bits)
    for ab in range(2):
        for elem in ("e4m3", "int8"):
            r = {"stack": f"chained int{bits} {elem} deferred", "M": M, "weight_bytes": nbytes, "ab": ab}
            yield _timed(r, {"step": [chain.step(layers, M, elem, True)]}, reps=5, min_calls=1)


if __name__ == "__main__":
    write_rows(sys.argv[1], then(rows(), stack_rows()))
