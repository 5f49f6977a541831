"""H200 probe (session 25): the decode band past 16 tokens (M = 32, 64: batched decode), before and after the mma2
kernels took it over.

Per shape (27B-class, TP=1, int4) and M, µs in a CUDA graph over weight copies that exceed the L2, side by side in
one run: cuBLAS bf16 (``x @ W.T``, the peer), the served GEMM (``w4a8_gemm``, band auto: the tuned table's pick)
and the Triton nib8 loop that served these M before (``nib8xpr``), e4m3 and int8 per-group activations; the served
linear with its rotate+quant launch too.

    python tools/device/probe_mid_band.py OUT.json

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import sys

from probe_rows import shape_row, time_calls, write_rows

from radiance_bench.kernelbench import cases
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.shapes import projections


def row(proj, M):
    r, wts, x = shape_row(proj, M)
    for elem in ("e4m3", "int8"):
        qs = [cases.rotate_quant(x, wt, elem, "group") for wt in wts]
        time_calls(r, {f"{elem}_{name}": c for name, c in {
            "served": [lambda wt=wt, q=q: cases.w4a8_gemm(wt, *q) for wt, q in zip(wts, qs, strict=True)],
            "nib8xpr": [lambda wt=wt, q=q: impl.gemm(*q, wt.w, wt.bounds, False, "decode", cfg=impl.DECODE["nib8xpr"])
                        for wt, q in zip(wts, qs, strict=True)],
            "served_linear": [lambda wt=wt, e=elem: cases.w4a8_linear(x, wt, e) for wt in wts],
        }.items()}, reps=10)
        r[f"{elem}_served_x_cublas"] = r["cublas_bf16_us"] / r[f"{elem}_served_us"]
        r[f"{elem}_linear_x_cublas"] = r["cublas_bf16_us"] / r[f"{elem}_served_linear_us"]
        r[f"{elem}_served_x_nib8xpr"] = r[f"{elem}_nib8xpr_us"] / r[f"{elem}_served_us"]
    del wts
    return r


def main(path):
    write_rows(path, (row(proj, M) for proj in projections(1) if proj.name != "gdn.in_proj_ba" for M in (32, 64)))


if __name__ == "__main__":
    main(sys.argv[1])
