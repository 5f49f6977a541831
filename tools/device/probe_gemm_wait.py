"""Probe (GPU): the decode GEMM launched as a programmatic dependent of the launch before it (``WAIT``: scheduled as
that launch's programs exit, waiting at its start), against the GEMM launched plain after it, on the 64-layer stack
in model order (:mod:`radiance_bench.kernelbench.chain`) at decode M = 8, reduced and deferred, e4m3 and int8
per-group activations, A/B interleaved in one process (best of 5 replays each, twice); outputs checked equal between
the two forms. Writes ``$OUT/probe_gemm_wait.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir \
        python3 tools/device/probe_gemm_wait.py [bits ...]
"""

import sys

import torch
from probe_out import Roles, record, save

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.ops.w4a8_gemm import gemv, mma2

ORIG = {"mma2": mma2._w4a8_mma2_kernel, "gemv": gemv._w4a8_gemv_kernel}


def use(waits: bool) -> None:
    """The GEMMs as the launch sets them (``waits``), or launched plain: no wait, no programmatic edge to them."""
    mma2._w4a8_mma2_kernel = ORIG["mma2"] if waits else Roles(ORIG["mma2"], WAIT=False, launch_pdl=False)
    gemv._w4a8_gemv_kernel = ORIG["gemv"] if waits else Roles(ORIG["gemv"], WAIT=False, launch_pdl=False)


res = []
M = 8
for bits in map(int, sys.argv[1:] or ["4"]):
    layers, nbytes = chain.build(M, bits)
    for elem in ("e4m3", "int8"):
        for defer in (False, True):
            run = chain.step(layers, M, elem, defer)
            outs = {}
            for waits in (True, False, True, False):
                use(waits)
                outs[waits] = run()
                t = graph_time([run], reps=5, min_calls=1)
                record(res, dict(bits=bits, elem=elem, defer=defer, gemm_waits=waits, best_us=t.best_us,
                                 median_us=t.median_us, weight_GB=nbytes / 1e9))
            res[-1]["same"] = all(torch.equal(a, b) for a, b in zip(outs[True], outs[False], strict=True))
            use(True)
    del layers
save("probe_gemm_wait", res, lambda r: f"int{r['bits']} {r['elem']:5s} {'deferred' if r['defer'] else 'reduced ':8s} "
     f"gemm {'waits' if r['gemm_waits'] else 'plain'} {r['best_us'] / 1e3:7.3f} ms"
     f"{'' if r.get('same', True) else '  DIFFERS'}")
