"""H200 probe (session 30): the served decode picks under their register caps (``w4a8_gemm.triton.REGISTER_CAPS``).

``mma2n64t2so16`` / ``mma8n64t2so16`` size their grid for 16 two-warp programs per SM but hold 68-72 registers, so 14
fit; ``mma2n64t2o12`` sizes it for 12 and holds 94 (10 fit); ``wgn64t2o8`` at M = 16 holds 61 and its 8 programs fill
the register file. Their ``r{cap}`` twins are the same launches under a ptxas register cap. Per TP = 1 shape, M (1, 8,
16) and activation element (e4m3 / int8 per-group) whose tuned pick — reduced or deferred — has a twin, A/B
interleaved twice in one process, µs in CUDA graphs over weight copies that exceed the L2: the GEMM alone (in the
pick's form) and the served linear (rotate+quant launch + the reduced GEMM); outputs checked equal (the cap changes
registers, not the math). Then the 64-layer chained int4 stack at M = 8 and 16 (deferred, e4m3 and int8 per-group)
with every twin standing in for its pick, A/B twice.

    python tools/device/probe_register_cap.py OUT.json

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import sys
from itertools import chain as then

import torch
from probe_rows import shape_row, time_calls, write_rows

from radiance_bench.kernelbench import cases, chain
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

TWIN = {name: f"{name}r{cap}" for name, cap in impl.REGISTER_CAPS.items()}


def _picks(gpu, proj, M, act):
    """{form: (pick, twin)} of ``proj`` at ``M`` where the pick has a capped twin that runs at that M."""
    out = {}
    for form, defer in (("reduced", False), ("deferred", True)):
        e = tuned.entry(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, act, 4, defer)
        twin = e and TWIN.get(e["config"])
        if twin and not (impl.DECODE[twin]["wg"] and M > 16) and not e.get("reduced"):
            out[form] = (e["config"], twin)
    return out


def _ab(r, key, wts, qs, x, act, names, defer):
    """``names`` (pick, twin) A/B twice into ``r``: the GEMM alone in its form; reduced, the linear too."""
    def gemm(wt, q, name):
        return impl.gemm(*q, wt.w, wt.bounds, False, "decode", cfg=impl.DECODE[name], defer=defer)

    a, b = (gemm(wts[0], qs[0], n) for n in names)
    r[key + "_configs"], r[key + "_same"] = list(names), torch.equal(a, b)
    whats = ("gemm",) if defer else ("gemm", "linear")
    for rep in (1, 2):
        for tag, name in zip(("pick", "capped"), names, strict=True):
            calls = {"gemm": [lambda wt=wt, q=q, n=name: gemm(wt, q, n) for wt, q in zip(wts, qs, strict=True)],
                     "linear": [lambda wt=wt, n=name: gemm(wt, cases.rotate_quant(x, wt, act, "group"), n)
                                for wt in wts]}
            time_calls(r, {f"{key}_{tag}_{what}_{rep}": calls[what] for what in whats}, reps=10)
    for what in whats:
        pick, capped = (min(r[f"{key}_{tag}_{what}_{rep}_us"] for rep in (1, 2)) for tag in ("pick", "capped"))
        r[f"{key}_{what}_capped_x"] = pick / capped  # > 1: the capped twin is faster


def rows():
    gpu = torch.cuda.get_device_name()
    for proj in projections(1):
        for M in (1, 8, 16) if proj.name != "gdn.in_proj_ba" else ():
            picks = {act: _picks(gpu, proj, M, act) for act in ("e4m3", "int8")}
            if not any(picks.values()):
                continue
            r, wts, x = shape_row(proj, M)
            for act, forms in picks.items():
                qs = [cases.rotate_quant(x, wt, act, "group") for wt in wts]
                for form, names in forms.items():
                    _ab(r, f"{act}_{form}", wts, qs, x, act, names, form == "deferred")
            del wts
            yield r


def stack_rows(bits: int = 4):
    saved = dict(impl.DECODE)
    for M in (8, 16):
        layers, nbytes = chain.build(M, bits)
        for ab in range(2):
            for elem in ("e4m3", "int8"):
                r = {"stack": f"chained int{bits} {elem} deferred", "M": M, "weight_bytes": nbytes, "ab": ab}
                for tag in ("pick", "capped"):
                    if tag == "capped":  # each twin stands in for its pick under the pick's name
                        impl.DECODE.update({name: saved[twin] for name, twin in TWIN.items()
                                            if not (saved[twin]["wg"] and M > 16)})
                    with programmatic_launch(True):
                        t = graph_time([chain.step(layers, M, elem, True)], reps=5, min_calls=1)
                    impl.DECODE.update(saved)
                    r[tag + "_us"], r[tag + "_median_us"] = t.best_us, t.median_us
                r["capped_x"] = r["pick_us"] / r["capped_us"]
                yield r


if __name__ == "__main__":
    write_rows(sys.argv[1], then(rows(), stack_rows()))
