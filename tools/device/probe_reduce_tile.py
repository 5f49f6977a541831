"""H200 probe (session 27): the mma2 split reduction read from tile-local partials in 16-byte vectors, against the
kernel before it (the last program reading ``[S, M, N]`` partials in the MMA layout, one element per load).

Per shape (27B-class, TP=1, int4) and M (8, 16: the decode bars; 32, 64: batched decode), e4m3 and int8 per-group
activations, µs in CUDA graphs over weight copies that exceed the L2, side by side in one run: the served GEMM (the
tuned table's pick) on this tree's kernel (``new``), on the baseline kernel (``old``: ``BASELINE``, a copy of
``ops/w4a8_gemm/mma2.py`` at an earlier commit), the same launch leaving its partials (``defer``: no reduction at
all — the floor of any reduction) and cuBLAS bf16 (``x @ W.T``, the peer); ``equal``: new and old outputs bit for
bit.

    git show 8b95e5a:packages/radiance-kernels/src/radiance_kernels/ops/w4a8_gemm/mma2.py > tools/device/mma2_base.py
    python tools/device/probe_reduce_tile.py tools/device/mma2_base.py OUT.json

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import importlib.util
import sys

import torch
from probe_rows import shape_row, time_calls, write_rows

from radiance_bench.kernelbench import cases
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections


def baseline_kernel(path):
    spec = importlib.util.spec_from_file_location("mma2_base", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._w4a8_mma2_kernel


def row(proj, M, old):
    r, wts, x = shape_row(proj, M)
    N, K = proj.N, proj.K
    new = impl._mma2_kernel

    def gemm(wt, q, cfg, kernel=None, defer=False):
        impl._mma2_kernel = (lambda: kernel) if kernel else new
        try:
            return impl.gemm(*q, wt.w, wt.bounds, False, "decode", cfg=cfg, defer=defer)
        finally:
            impl._mma2_kernel = new

    for elem in ("e4m3", "int8"):
        name = tuned.pick(torch.cuda.get_device_name(), "w4a8_gemm", "decode", M, N, K, elem, 4)
        cfg = impl.DECODE[name]
        c = impl.config(M, N, K, "decode", False, cfg)
        r[f"{elem}_config"], r[f"{elem}_splits"], r[f"{elem}_rw"] = name, c["splits"], c["rw"]
        qs = [cases.rotate_quant(x, wt, elem, "group") for wt in wts]
        r[f"{elem}_equal"] = bool(torch.equal(gemm(wts[0], qs[0], cfg), gemm(wts[0], qs[0], cfg, old)))
        time_calls(r, {f"{elem}_{v}": [lambda wt=wt, q=q, k=k, d=d, c=cfg: gemm(wt, q, c, k, d)
                                       for wt, q in zip(wts, qs, strict=True)]
                       for v, k, d in (("old", old, False), ("new", None, False), ("defer", None, True))}, reps=10)
        r[f"{elem}_new_x_old"] = r[f"{elem}_old_us"] / r[f"{elem}_new_us"]
        r[f"{elem}_new_x_cublas"] = r["cublas_bf16_us"] / r[f"{elem}_new_us"]
    del wts
    return r


def main(base, path):
    old = baseline_kernel(base)
    write_rows(path, (row(proj, M, old) for proj in projections(1)
                      if proj.name not in ("gdn.in_proj_ba", "gdn.out_proj") for M in (8, 16, 32, 64)))


if __name__ == "__main__":
    main(*sys.argv[1:])
