"""H200 probe (sessions 7, 21-23): what limits the Gluon Hopper prefill kernel
(:mod:`radiance_kernels.ops.w4a8_gemm.wgmma`)?

Times the kernel alone (its per-call operands — the 8-bit weight copy and the column factors — built once, outside
the timing; int4 weights, ``--bits 5`` int5) at M = 2048 on the qkv and gate_up shapes (gate_up also at 8192), e4m3
per-token and int8 per-group activations, for every wgmma config (the warp-specialised ``ws`` ones too) and its
ablations, each compiled with a helper of the module swapped before compiling: ``nofold`` (each group's sums added
to the accumulator unscaled: the MMA / TMA pipeline alone, the row-input loads gone with the fold), for int8 rows
``noas`` (the fold without the per-group activation scales: their loads gone, the operations kept) and ``beside``
(sessions 7-21's schedule: a group's fold beside the next group's MMAs, ``wait_group 1`` — which ptxas answers by
serialising every wgmma). In the same run: the library's per-tensor fp8 GEMM on the same M, N, K (the prefill bar's
ceiling) and its 1x128 block-scaled GEMM on the same 8-bit operand.

    python tools/device/probe_wgmma.py OUT.json [--configs wgmmaws ...] [--variants "" nofold ...] [--shapes 0 2]
    ncu ... python tools/device/probe_wgmma.py --launch wgmmaws nofold --act "int8 group" --shapes 1

(GPU, PYTHONPATH as h200_run.sh sets it); ``--launch``: that config and variant launched plainly a few times for a
profiler to attach to, timing nothing; ``--baseline FILE``: the kernel module of another revision (``git show
REV:packages/radiance-kernels/src/radiance_kernels/ops/w4a8_gemm/wgmma.py > FILE``) timed beside, each config as it
stands there (rows ``CONFIG @FILE``)."""

import argparse
import importlib.util
import json
import os
from functools import partial

os.environ.setdefault("TRITON_ALWAYS_COMPILE", "1")  # a builtin swapped for a jit function can keep the kernel's hash

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
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
def _fold_noas(acc, t, s_sh, sd_sh, rows, INT8, GROUP_AS, COL, ZFOLD):
    f = (t + 0x4B400000).to(wgmma.gl.float32, bitcast=True)
    f, s2 = wgmma.gl.broadcast(f, s_sh.load(COL)[None, :])
    f, c2 = wgmma.gl.broadcast(f, sd_sh.load(COL)[None, :])
    return acc + wgmma.gl.fma(f, s2, c2)


@gluon.jit
def _nothing():
    pass


#: each variant: the module globals it swaps before compiling (every jit function re-hashed); ``nofence`` (ws only,
#: timing only: the loader may refill a stage before a warp's scale loads have read it) drops the proxy fence before
#: an MMA warpgroup hands a stage back — its ``MEMBAR.ALL.CTA`` waits for the warp's loads in flight, the next group's
#: row inputs among them (call 150: not a cost). (Dropping the warpgroup's named barrier there measures nothing:
#: Triton's shared-memory analysis puts one back before the ``mbarrier.arrive``.)
ABLATED = {"": {}, "nofold": {"_fold": _fold_nofold}, "noas": {"_fold": _fold_noas},
           "beside": {"_FOLD_BESIDE_MMA": wgmma.gl.constexpr(1)}, "nofence": {"fence_async_shared": _nothing}}
WS_ONLY = {"nofence"}
INT8_ONLY = {"noas"}  # call 137 also timed session 21's four-operation int8 fold ("s21fold", commit d18339f)
KERNEL = {name: getattr(wgmma, name) for swaps in ABLATED.values() for name in swaps}
#: (proj, N, K, M): session 7's two shapes at M = 2048; session 21 added gate_up at M = 8192 and the ws configs
SHAPES = (("attn.qkv", 14336, 5120, 2048), ("mlp.gate_up", 34816, 5120, 2048), ("mlp.gate_up", 34816, 5120, 8192))
ACTS = ("e4m3 token", "int8 group")


def _use(variant: str) -> None:
    """Compile the kernels with ``variant``'s swapped globals (the kernel's own for the rest): every jit function of
    the module re-hashed and its compiled kernels dropped (a function left out keeps the old hash: call 133's void
    nofold rows)."""
    for name, value in (KERNEL | ABLATED[variant]).items():
        setattr(wgmma, name, value)
    for fn in vars(wgmma).values():
        if isinstance(fn, JITFunction):
            fn.hash = None
            fn.used_global_vals = {}  # else a caller's re-hash checks the new value against a callee's stale one
            fn.device_caches.clear()


def _operands(N: int, K: int, M: int, act: str, bits: int):
    """The shape's ``bits``-wide weights (8-bit copy, column factors) and one activation set of ``act``."""
    g = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 1 << bits, (K, N), generator=g, device="cuda", dtype=torch.uint8)
    zeros = torch.randint(0, 1 << bits, (K // 128, N), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(K // 128, N, generator=g, device="cuda") * 0.01 + 1e-3).half()
    w = prepare_codes(codes, zeros, scales, bits)
    int8 = act.startswith("int8")
    A = (torch.randint(-100, 100, (1, M, K), device="cuda", dtype=torch.int8) if int8 else
         torch.randint(0, 0x7E, (1, M, K), device="cuda", dtype=torch.uint8))
    AS = torch.rand(1, M, K // 128, device="cuda") if int8 else torch.rand(1, M, device="cuda")
    RS = torch.rand(1, M, K // 128, device="cuda")
    zfold = wgmma.zero_folds(bits, int8)
    w8, sc = impl.unpack_w8(w, int8, zfold=zfold, scales=True)
    return w, (A, AS, RS, w8, sc, [0, N], torch.empty(M, N, dtype=torch.bfloat16, device="cuda")), zfold


def _call(base: str, variant: str, M: int, N: int, K: int, args, zfold: bool, module=None):
    if module is None:
        _use(variant)
    cfg = impl.config(M, N, K, "prefill", False, impl.PREFILL[base])
    fn = partial((module or wgmma).gemm, *args, cfg, zfold)
    fn()
    torch.cuda.synchronize()
    return fn


def main(a) -> None:
    if a.launch:
        (_, N, K, M), = [SHAPES[i] for i in a.shapes]
        _, args, zfold = _operands(N, K, M, a.act, a.bits)
        fn = _call(*a.launch, M, N, K, args, zfold)
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
        return
    out = {"date": __import__("datetime").datetime.now().isoformat(), "gpu": torch.cuda.get_device_name(),
           "bits": a.bits, "rows": []}
    baseline = None
    if a.baseline:
        spec = importlib.util.spec_from_file_location("wgmma_baseline", a.baseline)
        baseline = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(baseline)
    for name, N, K, M in (SHAPES[i] for i in a.shapes):
        flops = 2 * M * N * K
        for act in ACTS:
            w, args, zfold = _operands(N, K, M, act, a.bits)
            for base in a.configs:
                for variant in a.variants:
                    ws = impl.PREFILL[base]["ws"]
                    if (variant in INT8_ONLY and not act.startswith("int8")) or \
                            (variant == "beside" and ws) or (variant in WS_ONLY and not ws):  # each its schedule
                        continue
                    t = graph_time([_call(base, variant, M, N, K, args, zfold)], reps=10)
                    out["rows"].append({"proj": name, "M": M, "act": act, "variant": f"{base} {variant}".strip(),
                                        "us": t.best_us, "TFLOPs": flops / t.best_us / 1e6})
                    print(out["rows"][-1], flush=True)
                if baseline is not None:
                    t = graph_time([_call(base, "", M, N, K, args, zfold, baseline)], reps=10)
                    out["rows"].append({"proj": name, "M": M, "act": act,
                                        "variant": f"{base} @{os.path.basename(a.baseline)}", "us": t.best_us,
                                        "TFLOPs": flops / t.best_us / 1e6})
                    print(out["rows"][-1], flush=True)
            _use("")
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
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out", nargs="?")
    p.add_argument("--configs", nargs="+", default=["wgmma", "wgmmam64", "wgmmaws"])
    p.add_argument("--variants", nargs="+", default=["", "nofold"], choices=list(ABLATED))
    p.add_argument("--shapes", nargs="+", type=int, default=[0, 1, 2], help="indices into SHAPES")
    p.add_argument("--launch", nargs=2, metavar=("CONFIG", "VARIANT"))
    p.add_argument("--act", default="int8 group", choices=ACTS)
    p.add_argument("--baseline", help="another revision's wgmma.py, timed beside")
    p.add_argument("--bits", type=int, default=4, choices=(4, 5), help="weight width (int5: e4m3 keeps the row sums)")
    args = p.parse_args()
    if not (args.out or args.launch):
        p.error("an output path, or --launch")
    main(args)
