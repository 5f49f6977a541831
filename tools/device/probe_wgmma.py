"""H200 probe (sessions 7, 21): what limits the Gluon Hopper prefill kernel
(:mod:`radiance_kernels.ops.w4a8_gemm.wgmma`)?

Times the kernel alone (its per-call operands — the 8-bit weight copy and the column factors — built once, outside
the timing) at M = 2048 on the qkv and gate_up shapes (gate_up also at 8192), e4m3 per-token and int8 per-group
activations, for every wgmma config (the warp-specialised ``ws`` ones too) and ``nofold`` (each group's sums added
to the accumulator unscaled — its ``_fold`` helper swapped for a trivial one before compiling: the MMA / TMA
pipeline alone) and, for int8 rows, ``s21fold`` (session 21's four-operation int8 fold: the exponent trick's offset
subtracted, then the row x column scale product and the FMA — session 22's fold takes the offset inside the FMA that
scales the sums). In the same run: the library's per-tensor fp8 GEMM on the same M, N, K (the prefill bar's ceiling)
and its 1x128 block-scaled GEMM on the same 8-bit operand. ``python tools/device/probe_wgmma.py OUT.json`` (GPU,
PYTHONPATH as h200_run.sh sets it)."""

import json
import os
import sys
from functools import partial

import torch
from triton.experimental import gluon
from triton.runtime.jit import JITFunction

from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm import wgmma
from radiance_kernels.ops.w4a8_gemm.reference import prepare_codes


@gluon.jit
def _fold_nofold(acc, t, s_sh, sd_sh, rows, INT8, GROUP_AS, COL, ZFOLD):
    if INT8:
        t = t.to(wgmma.gl.float32, bitcast=True)
    return acc + t


@gluon.jit
def _fold_s21(acc, t, s_sh, sd_sh, rows, INT8, GROUP_AS, COL, ZFOLD):
    t = (t + 0x4B400000).to(wgmma.gl.float32, bitcast=True) - 12582912.0
    s = s_sh.load(COL)
    rs, ag = rows
    if GROUP_AS:
        acc += (ag[:, None] * s[None, :]) * t
    else:
        acc += s[None, :] * t
    return acc


FOLD = wgmma._fold
ABLATED = {"nofold": _fold_nofold, "s21fold": _fold_s21}
#: (label, named config, config overrides); session 7's call 47 also timed a "late refill" variant (the operand
#: tiles refilled after the fold: 5-7 % slower on wgmma, mixed on wgmmam64; the knob is gone, see git log of
#: results/h200/2026-11-30-call47)
VARIANTS = tuple((f"{name}{v}", name, {}) for name in ("wgmma", "wgmmam64", "wgmmaws")
                 for v in ("", " nofold", " s21fold"))
#: (proj, N, K, M): session 7's two shapes at M = 2048; session 21 added gate_up at M = 8192 and the ws configs
SHAPES = (("attn.qkv", 14336, 5120, 2048), ("mlp.gate_up", 34816, 5120, 2048), ("mlp.gate_up", 34816, 5120, 8192))


def _use_fold(fold) -> None:
    """Compile the kernels with ``fold`` as their ``_fold``: every jit function of the module re-hashed and its
    compiled kernels dropped (a function left out keeps the old fold's hash: call 133's void nofold rows)."""
    wgmma._fold = fold
    for fn in vars(wgmma).values():
        if isinstance(fn, JITFunction):
            fn.hash = None
            fn.device_caches.clear()


def main(path: str) -> None:
    out = {"date": __import__("datetime").datetime.now().isoformat(), "gpu": torch.cuda.get_device_name(), "rows": []}
    for name, N, K, M in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        codes = torch.randint(0, 16, (K, N), generator=g, device="cuda", dtype=torch.uint8)
        zeros = torch.randint(0, 16, (K // 128, N), generator=g, device="cuda", dtype=torch.uint8)
        scales = (torch.rand(K // 128, N, generator=g, device="cuda") * 0.01 + 1e-3).half()
        w = prepare_codes(codes, zeros, scales, 4)
        flops = 2 * M * N * K
        for act in ("e4m3 token", "int8 group"):
            int8 = act.startswith("int8")
            A = (torch.randint(-100, 100, (1, M, K), device="cuda", dtype=torch.int8) if int8 else
                 torch.randint(0, 0x7E, (1, M, K), device="cuda", dtype=torch.uint8))
            AS = torch.rand(1, M, K // 128, device="cuda") if int8 else torch.rand(1, M, device="cuda")
            RS = torch.rand(1, M, K // 128, device="cuda")
            zfold = wgmma.zero_folds(4, int8)
            w8, sc = impl.unpack_w8(w, int8, zfold=zfold, scales=True)
            o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            for variant, base, over in VARIANTS:
                if variant.endswith("s21fold") and not int8:  # the e4m3 fold is unchanged
                    continue
                cfg = impl.config(M, N, K, "prefill", False, {**impl.PREFILL[base], **over})
                _use_fold(ABLATED.get(variant.rpartition(" ")[2], FOLD))
                fn = partial(wgmma.gemm, A, AS, RS, w8, sc, [0, N], o, cfg, zfold)
                fn()
                torch.cuda.synchronize()
                t = graph_time([fn], reps=10)
                _use_fold(FOLD)
                out["rows"].append({"proj": name, "M": M, "act": act, "variant": variant, "us": t.best_us,
                                    "TFLOPs": flops / t.best_us / 1e6})
                print(out["rows"][-1], flush=True)
        a8 = torch.randint(0, 0x7E, (M, K), device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)
        b8 = impl.unpack_w8(w, False).view(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        for variant, kw in (("_scaled_mm per-tensor", dict(scale_a=one, scale_b=one)),
                            ("_scaled_mm 1x128 blocks", dict(scale_a=torch.ones(K // 128, M, device="cuda").t(),
                                                             scale_b=torch.ones(K // 128, N, device="cuda")))):
            fn = partial(torch._scaled_mm, a8, b8.t(), out_dtype=torch.bfloat16, **kw)
            fn()
            t = graph_time([fn], reps=10)
            out["rows"].append({"proj": name, "M": M, "act": "e4m3", "variant": variant, "us": t.best_us,
                                "TFLOPs": flops / t.best_us / 1e6})
            print(out["rows"][-1], flush=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main(sys.argv[1])
