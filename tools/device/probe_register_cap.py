"""H200 probe (session 30): the e4m3 M = 16 decode GEMM under a register cap.

Session 27's split reduction took ``wgn64t2o8`` (the tuned e4m3 pick at M = 9-16 on most shapes) from 56 to 61-62
registers at 16 tokens — 8 programs per SM by registers instead of 9 — and in the same run the served e4m3 linear at
M = 16 slowed 2-5 % on o_proj / out_proj / gate_up although its GEMM alone got faster (call 176). ``wgn64t2o8r56`` is
the same config capped at 56 (ptxas sm_90: no spills, 227 against 233 loop instructions). Per shape whose tuned pick
at M = 16 (e4m3 per-group) is ``wgn64t2o8``, A/B interleaved twice in one process, µs in CUDA graphs over weight
copies that exceed the L2: the GEMM alone, the served linear (rotate+quant launch + GEMM) and the producer-fed GEMM
(the projection's stream producer, then the GEMM); outputs checked equal (the cap changes registers, not the math).

    python tools/device/probe_register_cap.py OUT.json [BASE CAPPED]

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import sys

import torch
from probe_rows import shape_row, time_calls, write_rows

from radiance_bench.kernelbench import cases
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

M, ELEM = 16, "e4m3"


def row(proj, names):
    r, wts, x = shape_row(proj, M)
    qs = [cases.rotate_quant(x, wt, ELEM, "group") for wt in wts]
    produced = [cases.producer_calls(proj.name, M, proj.K, i, wt, ELEM)[0] for i, wt in enumerate(wts)]

    def gemm(wt, q, name):
        return impl.gemm(*q, wt.w, wt.bounds, False, "decode", cfg=impl.DECODE[name])

    outs = [gemm(wts[0], qs[0], name) for name in names]
    r["same"] = all(torch.equal(o, outs[0]) for o in outs[1:])
    r["configs"] = list(names)
    for rep in (1, 2):
        for name in names:
            time_calls(r, {f"{name}_{what}_{rep}": c for what, c in {
                "gemm": [lambda wt=wt, q=q, n=name: gemm(wt, q, n) for wt, q in zip(wts, qs, strict=True)],
                "linear": [lambda wt=wt, n=name: gemm(wt, cases.rotate_quant(x, wt, ELEM, "group"), n) for wt in wts],
                "fed": [lambda wt=wt, p=p, n=name: gemm(wt, p(), n) for wt, p in zip(wts, produced, strict=True)],
            }.items()}, reps=10)
    for what in ("gemm", "linear", "fed"):
        base, capped = (min(r[f"{n}_{what}_{rep}_us"] for rep in (1, 2)) for n in names)
        r[f"{what}_capped_x"] = base / capped  # > 1: the capped config is faster
    del wts
    return r


def main(path, names):
    gpu = torch.cuda.get_device_name()
    picked = [p for p in projections(1) if p.name != "gdn.in_proj_ba"
              and tuned.pick(gpu, "w4a8_gemm", "decode", M, p.N, p.K, ELEM, 4) == names[0]]
    if not picked:
        raise SystemExit(f"no projection's tuned e4m3 M = {M} pick on {gpu} is {names[0]}")
    write_rows(path, (row(p, names) for p in picked))


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:4]) or ("wgn64t2o8", "wgn64t2o8r56"))
