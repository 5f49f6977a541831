"""``python -m radiance_bench.kernelbench.run --out DIR``: every kernel bench of issue 6 in one run.

Sections (``--sections``): ceilings, decode, producer_decode, skinny, prefill, producer, stack, stack_profile
(where the chained step's time goes, launch by launch), and the A/B sections decode_variants, decode_pairs,
prefill_variants, producer_variants (``--configs`` picks named configs, ``--decode-m``, ``--prefill-m`` and
``--producer-m`` their M). Each figure is recorded with the ceiling and peers
measured in the same process; the JSON holds everything, the printed table the ratios the bars are stated in.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import traceback
from functools import partial
from pathlib import Path

import torch

from radiance_bench.kernelbench import ceilings, chain, pairs, peers, timeline, variants
from radiance_bench.kernelbench import producer_variants as pv
from radiance_bench.kernelbench.cases import (
    PRODUCER_OF,
    activations,
    producer_calls,
    rotate_quant,
    w4_weight,
    w4a8_gemm,
    w4a8_linear,
)
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.backends import programmatic_launch
from radiance_kernels.shapes import projections

DECODE_M = (1, 8, 16)
NO_PDL_M = (1, 8)  # decode rows also timed without programmatic dependent launch (the ablation)
PREFILL_M = (2048, 8192)
SECTIONS = ("ceilings", "decode", "producer_decode", "skinny", "prefill", "producer", "stack", "stack_profile",
            "decode_variants", "decode_pairs", "prefill_variants", "producer_variants")


def _record(results: list, section: str, kernel: str, t, **fields) -> dict:
    row = {"section": section, "kernel": kernel, **fields, **t.as_dict()}
    results.append(row)
    print(json.dumps(row), flush=True)  # a run cut by a time limit still leaves its rows in the log
    return row


def _no_pdl_tag(pdl: bool) -> dict:
    """The fields that mark a row timed without programmatic dependent launch (an ablation, never a bar)."""
    return {} if pdl else {"ablation": "no PDL"}


def _peer(results: list, section: str, name: str, build, flops: float, wbytes: int, **meta) -> dict | None:
    """Time a peer over DRAM-fed copies; ``build(i) -> (call, bytes per copy)``. Failures are recorded."""
    try:
        calls = [build(i)[0] for i in range(copies_needed(build(0)[1]))]
        t = graph_time(calls)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is recorded, not fatal
        results.append({"section": section, "kernel": name, "error": f"{type(exc).__name__}: {exc}"[:300], **meta})
        return None
    sec = t.best_us * 1e-6
    return _record(results, section, name, t, TFLOPs=flops / sec / 1e12, weight_TBps=wbytes / sec / 1e12, **meta)


def _gemm_call(w, pre, zpe: bool = False):
    """The GEMM launch alone on pre-quantised activations ``pre = (A, AS, RS)``."""
    return lambda: w4a8_gemm(w, *pre, zpe)


def _linear_call(x, w, elem="e4m3", gran="group", zpe=False):
    return lambda: w4a8_linear(x, w, elem, gran, zpe)


def decode(results: list, ceil: dict) -> None:
    """Decode band: the linear as rotate+quant launch + GEMM launch at M = 1..16, int4 everywhere, int5 and
    the GEMM alone at M = 8, each with e4m3 per-group activations (the tensor-core kernel) and int8 per-group
    ones (the seeds' production format; the gemv kernel or the nib8 loop per the tuned table); peers cuBLAS bf16
    everywhere, GemLite at M = 8 on qkv / gate_up."""
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba":
            continue
        meta0 = {"proj": proj.name, "N": proj.N, "K": proj.K}
        for bits in (4, 5):
            n = copies_needed(w4_weight(proj, bits, 0).nbytes)
            weights = [w4_weight(proj, bits, seed=i) for i in range(n)]
            for M in DECODE_M if bits == 4 else (8,):
                x = activations(M, proj.K, seed=M)
                for elem, suffix in (("e4m3", ""), ("int8", " int8-group")):
                    linear = [_linear_call(x, w, elem) for w in weights]
                    variants = [("w4a8 rot+gemm", linear, True)]
                    if bits == 4 and M == 8:
                        variants.append(("w4a8 gemm only", [_gemm_call(w, rotate_quant(x, w, elem)) for w in weights],
                                         True))
                    if bits == 4 and M in NO_PDL_M:  # ablation: the same launches without PDL
                        variants.append(("w4a8 rot+gemm no-PDL", linear, False))
                    for label, calls, pdl in variants:
                        with programmatic_launch(pdl):
                            t = graph_time(calls)
                        tbps = weights[0].nbytes / (t.best_us * 1e-6) / 1e12
                        _record(results, "decode", f"{label} int{bits}{suffix}", t, M=M, **meta0, act=elem,
                                weight_TBps=tbps, frac_copy=tbps / ceil["copy_TBps"],
                                frac_read=tbps / ceil["read_TBps"], **_no_pdl_tag(pdl))
            del weights
        for M in DECODE_M:
            meta, fl = {**meta0, "M": M}, 2 * M * proj.N * proj.K
            _peer(results, "decode", "cuBLAS bf16", partial(peers.cublas_bf16, M, proj.N, proj.K), fl,
                  proj.N * proj.K * 2, **meta)
            if M == 8 and proj.name in ("attn.qkv", "mlp.gate_up"):
                for kind in ("A16W4", "A8W4"):
                    _peer(results, "decode", f"GemLite {kind}", partial(peers.gemlite, kind, M, proj.N, proj.K), fl,
                          proj.N * proj.K // 2 + proj.N * proj.K // 128 * 4, **meta)


def producer_decode(results: list, ceil: dict) -> None:
    """Each projection's stream producer at decode M = 1..16, fused with its rotate+quant (e4m3 per
    group) and plain: their difference is what the rotation costs when it rides on the producer the
    layer runs anyway (the served form)."""
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba":
            continue
        w = w4_weight(proj, 4, seed=0)
        for M in DECODE_M:
            for label, call in zip(("producer fused", "producer plain"), producer_calls(proj.name, M, proj.K, M, w),
                                   strict=True):
                _record(results, "producer_decode", f"{label} ({PRODUCER_OF[proj.name]})", graph_time([call]), M=M,
                        proj=proj.name, P=proj.P, K=proj.K)


def skinny(results: list, ceil: dict) -> None:
    """in_proj_ba per rank at TP = 1 and 2 (N = 96, 48), each M: the skinny GEMM against cuBLAS bf16."""
    for proj, M in ((p, M) for tp in (1, 2) for p in projections(tp) if p.name == "gdn.in_proj_ba" for M in DECODE_M):
        g = torch.Generator(device="cuda").manual_seed(M)
        ws = [torch.randn(proj.N, proj.K, generator=g, device="cuda").to(torch.bfloat16) for _ in range(8)]
        x = activations(M, proj.K, M)
        meta = {"proj": proj.name, "M": M, "N": proj.N, "K": proj.K}
        t = graph_time([partial(torch.ops.radiance.skinny_gemm, x, w, "triton") for w in ws])
        _record(results, "skinny", "skinny_gemm", t, **meta)
        t = graph_time([partial(torch.matmul, x, w.t()) for w in ws])
        _record(results, "skinny", "cuBLAS bf16", t, **meta)


PREFILL_VARIANTS = [("e4m3 group", 4, "e4m3", "group", False), ("e4m3 token", 4, "e4m3", "token", False),
                    ("int8 group ZPE", 4, "int8", "group", True), ("e4m3 token", 5, "e4m3", "token", False)]


def prefill(results: list, ceil: dict) -> None:
    """Prefill band at M = 2048 on every shape (+ M = 8192 on gate_up): the GEMM alone and with its
    prologue, against ``_scaled_mm`` fp8 and cuBLAS bf16 at the same (M, N, K); GemLite on gate_up."""
    for proj in projections(1):
        if proj.name == "gdn.in_proj_ba":
            continue
        for M in PREFILL_M if proj.name == "mlp.gate_up" else PREFILL_M[:1]:
            fl = 2 * M * proj.N * proj.K
            meta = {"proj": proj.name, "M": M, "N": proj.N, "K": proj.K}
            ref = _peer(results, "prefill", "_scaled_mm fp8", partial(peers.scaled_mm_fp8, M, proj.N, proj.K), fl,
                        proj.N * proj.K, **meta)
            _peer(results, "prefill", "cuBLAS bf16", partial(peers.cublas_bf16, M, proj.N, proj.K), fl,
                  proj.N * proj.K * 2, **meta)
            if proj.name == "mlp.gate_up" and PREFILL_M[0] == M:
                _peer(results, "prefill", "GemLite A8W4", partial(peers.gemlite, "A8W4", M, proj.N, proj.K), fl,
                      proj.N * proj.K // 2, **meta)
            x = activations(M, proj.K, seed=M)
            for label, bits, elem, gran, zpe in PREFILL_VARIANTS:
                w = w4_weight(proj, bits, seed=0)
                for what, call in (("gemm", _gemm_call(w, rotate_quant(x, w, elem, gran), zpe)),
                                   ("rot+gemm", _linear_call(x, w, elem, gran, zpe))):
                    t = graph_time([call], min_calls=8)
                    tf = fl / (t.best_us * 1e-6) / 1e12
                    _record(results, "prefill", f"w4a8 {what} int{bits} {label}", t, **meta, TFLOPs=tf,
                            vs_scaled_mm=tf / ref["TFLOPs"] if ref else None)


def producer(results: list, ceil: dict, M: int = 8192, K: int = 5120) -> None:
    from radiance_kernels.formats.rotation import random_rotations

    x = activations(M, K, 0)
    for P in (1, 2, 3):
        rot = random_rotations(P, K, seed=P, device="cuda")
        for elem, gran in (("e4m3", "token"), ("e4m3", "group"), ("int8", "group")):
            t = graph_time([partial(torch.ops.radiance.rotate_quant, x, *rot, elem, gran, "triton")], min_calls=8)
            tbps = (M * K * 2 + P * M * K + P * M * (K // 128) * 8) / (t.best_us * 1e-6) / 1e12
            _record(results, "producer", f"rotate_quant {elem} {gran}", t, M=M, K=K, P=P, TBps=tbps,
                    frac_copy=tbps / ceil["copy_TBps"])


def stack(results: list, ceil: dict, M: int = 8, bits: tuple[int, ...] = (4,)) -> None:
    """:func:`stack_of` for each weight width in ``bits``."""
    for b in bits:
        stack_of(results, ceil, M, b)


def stack_of(results: list, ceil: dict, M: int, bits: int) -> None:
    """64 layers of the 27B-class linears at decode M, each variant one CUDA graph, against the weight
    stream: "served" runs every linear as the served layer does (its fused stream producer, then the GEMM;
    in_proj_ba by the skinny GEMM) with e4m3 per-group activations, "served ... int8-group" the same with int8
    per-group activations, "rot+gemm" a standalone rotate+quant launch instead of the producer (session 1's row),
    "gemm only" the GEMMs on pre-quantised activations (ablation: the producers' share), and the peer "cuBLAS
    bf16" the unrotated bf16 layer (plain producers + cuBLAS). Every row launches with programmatic dependent
    launch where it runs; the "no-PDL" rows (ablation) are the served ones without it. Then the stack in model order
    (:mod:`.chain`: each producer reads the GEMM output before it), "chained" with every GEMM reducing its splits and
    "chained ... deferred" with the GEMMs our producers read leaving their split partials to them, on the table's
    picks for that form (``same_as_reduced``: the same bits as the reduced chain on those configs), and "... deferred
    skinny-overlap" the same with in_proj_ba's skinny GEMM in its ``overlap`` form (multiplying beside the GEMM ahead
    of it, writing after it)."""
    served, served8, rot_gemm, gemm_only, bf16, total, total_bf16 = [], [], [], [], [], 0, 0
    for proj in projections(1):
        for layer in range(proj.count):
            x = activations(M, proj.K, layer)
            if proj.name == "gdn.in_proj_ba":
                w = torch.randn(proj.N, proj.K, device="cuda").to(torch.bfloat16)
                skinny = partial(torch.ops.radiance.skinny_gemm, x, w, "triton")
                for calls in (served, served8, rot_gemm, gemm_only):
                    calls.append(skinny)
                bf16.append(partial(torch.matmul, x, w.t()))
                total += w.numel() * 2
                total_bf16 += w.numel() * 2
                continue
            w = w4_weight(proj, bits, seed=layer)
            fused, plain = producer_calls(proj.name, M, proj.K, layer, w)
            served.append(lambda f=fused, w=w: w4a8_gemm(w, *f()))
            fused8 = producer_calls(proj.name, M, proj.K, layer, w, "int8")[0]
            served8.append(lambda f=fused8, w=w: w4a8_gemm(w, *f()))
            rot_gemm.append(_linear_call(x, w))
            gemm_only.append(_gemm_call(w, rotate_quant(x, w), False))
            wb = torch.randn(proj.N, proj.K, device="cuda").to(torch.bfloat16)
            bf16.append(lambda p=plain, wb=wb: torch.matmul(p(), wb.t()))
            total += w.nbytes
            total_bf16 += wb.numel() * 2
    bw = max(ceil["copy_TBps"], ceil["read_TBps"]) * 1e12  # weights are only read
    rows = ((f"served int{bits}", served, total, True), (f"served int{bits} int8-group", served8, total, True),
            (f"rot+gemm int{bits}", rot_gemm, total, True), (f"gemm only int{bits}", gemm_only, total, True),
            ("cuBLAS bf16 + plain producers", bf16, total_bf16, True),
            (f"served int{bits} no-PDL", served, total, False),
            (f"served int{bits} int8-group no-PDL", served8, total, False))
    for name, calls, nbytes, pdl in rows:
        with programmatic_launch(pdl):  # no-PDL: the ablation of the producers' programmatic dependents
            t = graph_time([lambda calls=calls: [c() for c in calls]], reps=5, min_calls=1)
        _stack_row(results, f"64-layer {name}", t, M, nbytes, bw, **_no_pdl_tag(pdl))
    del served, served8, rot_gemm, gemm_only, bf16, rows
    layers, nbytes = chain.build(M, bits)  # model order, each producer reading the GEMM before it
    for elem, suffix in (("e4m3", ""), ("int8", " int8-group")):
        steps = {"": chain.step(layers, M, elem), " deferred": chain.step(layers, M, elem, True),
                 " deferred skinny-overlap": chain.step(layers, M, elem, True, overlap_skinny=True)}
        with programmatic_launch(True):
            same = chain.same_outputs(chain.step(layers, M, elem, deferred_configs=True)(), steps[" deferred"]())
            for form, run in steps.items():
                t = graph_time([run], reps=5, min_calls=1)
                _stack_row(results, f"64-layer chained int{bits}{suffix}{form}", t, M, nbytes, bw,
                           same_as_reduced=same)


def stack_profile(results: list, ceil: dict, M: int = 8, bits: tuple[int, ...] = (4,)) -> None:
    """The chained deferred stack at decode M as served (:mod:`.chain`; in_proj_ba's skinny GEMM overlapping
    in_proj_qkvz's), e4m3 and int8 per-group, traced launch by launch
    (:mod:`.timeline`): per role the exposed time against the weight-stream limit of what it streams, every launch's
    start and end, and the step untraced (best of 5 graph replays) beside the traced one."""
    bw = max(ceil["copy_TBps"], ceil["read_TBps"])  # weights are only read
    for b in bits:
        layers, nbytes = chain.build(M, b)
        for elem, suffix in (("e4m3", ""), ("int8", " int8-group")):
            run = chain.step(layers, M, elem, defer=True, overlap_skinny=True)
            with programmatic_launch(True):
                ks = timeline.traced_kernels(run)
                t = graph_time([run], reps=5, min_calls=1)
            rows = timeline.attribute(ks, chain.roles(layers), bw)
            limit_us = nbytes / (bw * 1e12) * 1e6
            _record(results, "stack_profile", f"64-layer chained int{b}{suffix} deferred skinny-overlap", t, M=M,
                    label=f"int{b}{suffix}", step_us=ks[-1]["end"], untraced_us=t.best_us, limit_us=limit_us,
                    vs_limit=t.best_us / limit_us, roles=rows, launches=ks)
            print(timeline.table(rows), flush=True)
        del layers


def _stack_row(results: list, name: str, t, M: int, nbytes: int, bw: float, **fields) -> None:
    limit_us = nbytes / bw * 1e6  # this row's own weight-stream limit
    _record(results, "stack", name, t, M=M, weight_bytes=nbytes, limit_us=limit_us, vs_limit=t.best_us / limit_us,
            weight_TBps=nbytes / (t.best_us * 1e-6) / 1e12, **fields)


def decode_variants(results: list, ceil: dict, ms=DECODE_M, names=None, bits=(4,)) -> None:
    """A/B of the W4A8 GEMM's named decode tile configs (:mod:`.variants`)."""
    variants.decode_variants(partial(_record, results), results, ceil, ms=ms, names=names, bits=bits)


def decode_pairs(results: list, ceil: dict, ms=DECODE_M, names=None, bits=(4,)) -> None:
    """A/B of the decode configs of each GEMM a producer reads, timed with that producer, deferred (:mod:`.pairs`)."""
    pairs.decode_pairs(partial(_record, results), results, ms=ms, names=names, bits=bits)


def prefill_variants(results: list, ceil: dict, ms=(2048,), names=None) -> None:
    """A/B of the W4A8 GEMM's named prefill tile configs (:mod:`.variants`)."""
    for M in ms:
        variants.prefill_variants(partial(_record, results), results, ceil, M=M, names=names)


def producer_variants(results: list, ceil: dict, ms=(8192,), names=None) -> None:
    """A/B of the rotate+quant producer's named launch configs (:mod:`.producer_variants`)."""
    for M in ms:
        pv.producer_variants(partial(_record, results), results, ceil, M=M, names=names)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sections", nargs="*", default=list(SECTIONS))
    ap.add_argument("--decode-m", nargs="*", type=int, default=list(DECODE_M), help="M of decode_variants / _pairs")
    ap.add_argument("--prefill-m", nargs="*", type=int, default=[2048], help="M of prefill_variants")
    ap.add_argument("--producer-m", nargs="*", type=int, default=[8192], help="M of producer_variants")
    ap.add_argument("--bits", nargs="*", type=int, default=[4],
                    help="weight widths of decode_variants / _pairs, stack, stack_profile")
    ap.add_argument("--configs", nargs="*", default=None, help="named configs of the A/B sections")
    args = ap.parse_args(argv)
    decode = dict(ms=tuple(args.decode_m), names=args.configs, bits=tuple(args.bits))
    options = {"decode_variants": decode, "decode_pairs": decode,
               "stack": dict(bits=tuple(args.bits)), "stack_profile": dict(bits=tuple(args.bits)),
               "prefill_variants": dict(ms=tuple(args.prefill_m), names=args.configs),
               "producer_variants": dict(ms=tuple(args.producer_m), names=args.configs)}
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}
    results: list[dict] = []
    ceil = ceilings.measure()
    print("ceilings", json.dumps(ceil), flush=True)
    for name in args.sections:
        if name == "ceilings":
            continue
        try:
            globals()[name](results, ceil, **options.get(name, {}))
        except Exception as exc:  # noqa: BLE001 - keep the other sections' figures
            traceback.print_exc()
            results.append({"section": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
        (args.out / f"kb-{'-'.join(args.sections)}.json").write_text(json.dumps({"meta": meta, "ceilings": ceil,
                                                              "results": results}, indent=1))
        print(f"section {name} done ({len(results)} rows)", flush=True)
    from radiance_bench.kernelbench.report import table

    print(table({"meta": meta, "ceilings": ceil, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
