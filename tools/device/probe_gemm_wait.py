"""Probe (GPU): the decode GEMM launched as a programmatic dependent of its producer (``WAIT``) — scheduled once the
producer's programs trigger after their own wait ("late", the served form), or only as they exit ("exit": the
producers' trigger left out) — against the GEMM launched plain after it, on the 64-layer stack in model order
(:mod:`radiance_bench.kernelbench.chain`) at decode M = 8, reduced and deferred, e4m3 and int8 per-group activations,
interleaved in one process (best of 5 replays each, twice); outputs checked equal between the forms. Writes
``$OUT/probe_gemm_wait.json``.

    PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src OUT=dir \
        python3 tools/device/probe_gemm_wait.py [bits ...]
"""

import sys

import torch
from probe_out import Roles, record, save

from radiance_bench.kernelbench import chain
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.ops.w4a8_gemm import gemv, mma2

ORIG = {"mma2": mma2._w4a8_mma2_kernel, "gemv": gemv._w4a8_gemv_kernel, "prologue": st._prologue_kernel}
FORMS = ("late", "plain", "exit")


def use(form: str) -> None:
    """The launches as served ("late"), the GEMMs launched plain ("plain": no wait, no programmatic edge to them), or
    the producers not triggering ("exit")."""
    plain = {"WAIT": False, "launch_pdl": False}
    mma2._w4a8_mma2_kernel = Roles(ORIG["mma2"], **plain) if form == "plain" else ORIG["mma2"]
    gemv._w4a8_gemv_kernel = Roles(ORIG["gemv"], **plain) if form == "plain" else ORIG["gemv"]
    st._prologue_kernel = Roles(ORIG["prologue"], TRIGGER=False) if form == "exit" else ORIG["prologue"]


res = []
M = 8
for bits in map(int, sys.argv[1:] or ["4"]):
    layers, nbytes = chain.build(M, bits)
    for elem in ("e4m3", "int8"):
        for defer in (False, True):
            run = chain.step(layers, M, elem, defer)
            outs = {}
            for form in FORMS * 2:
                use(form)
                outs[form] = run()
                t = graph_time([run], reps=5, min_calls=1)
                record(res, dict(bits=bits, elem=elem, defer=defer, form=form, best_us=t.best_us,
                                 median_us=t.median_us, weight_GB=nbytes / 1e9))
            res[-1]["same"] = all(torch.equal(a, b) for f in FORMS[1:] for a, b in zip(outs[f], outs["late"],
                                                                                          strict=True))
            use("late")
    del layers
save("probe_gemm_wait", res, lambda r: f"int{r['bits']} {r['elem']:5s} {'deferred' if r['defer'] else 'reduced ':8s} "
     f"{r['form']:5s} {r['best_us'] / 1e3:7.3f} ms"
     f"{'' if r.get('same', True) else '  DIFFERS'}")
