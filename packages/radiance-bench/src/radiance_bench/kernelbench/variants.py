"""A/B sections: the W4A8 GEMM's named tile configs side by side in one process.

``decode_variants``: every config of ``w4a8_gemm.triton.DECODE`` at M = 1, 8, 16 on each TP=1 shape with e4m3
activations, the gemv and mma2 configs and :data:`INT8_MMA` also with int8 ones (rows marked ``act``), then
the ablation rows ``"<config>:nodot"`` (loads + unpack, no MMA; mma2: no unpack either), ``"<config>:noload"``
(unpack + MMA, no weight loads), ``"<config>:nofold"`` (mma2: no scale fold) and ``"<config>:ring"`` (mma2 ring
configs: the TMA ring alone) for :data:`ABLATE_CONFIGS` — what limits a config, by removing one part; their outputs are
wrong by design, so their ``rel_vs_first`` is not a check (``ablation`` = True on those rows);
``prefill_variants``: every config of ``PREFILL`` at M = 2048 on three shapes, once per activation format
of :data:`PREFILL_ACTS` (e4m3 per-group, the served decode format; int8 per-group with the zero-point
epilogue, the seeds' production format), then int5 weights for :data:`PREFILL_INT5` in both formats. The
GEMM alone on activations pre-quantised by ``rotate_quant``, weights DRAM-fed. Each row names its
activation format (``act``) and carries its split count and its relative error against the first config's
output in the same format and weight width (the first version, checked against the reference at full
shapes); ``frac_fp8_ceiling`` of int8 rows is against the same ceiling (H200: int8 and fp8 dense peaks
are equal).
"""

from __future__ import annotations

from functools import partial

import torch

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.shapes import projections

DECODE_M = (1, 8, 16)
#: the configs with ablation rows, and theirs: nib8 loops without MMA / weight loads; mma2 without the scale fold, and
#: its ring configs also without operands, MMAs and fold ("nodot": the fragments' words consumed) and as the TMA ring
#: alone ("ring")
ABLATE_CONFIGS = {**dict.fromkeys(("nib8x", "nib8xpr", "swap"), ("nodot", "noload")), "mma8n64p": ("nofold",),
                  **dict.fromkeys(("mma8n64t2", "mma2t2"), ("nodot", "nofold", "ring"))}
INT8_MMA = "nib8xpr"  # the tensor-core loop (int8 as exact fp16) the int8 gemv configs are timed against
#: every (N, K) the prefill table keys: gdn.out_proj shares o_proj's, in_proj_ba is the skinny GEMM's
PREFILL_SHAPES = ("attn.qkv", "attn.o_proj", "mlp.gate_up", "mlp.down", "gdn.in_proj_qkvz")
#: (act label, element, granularity, zpe); ``kernelbench.tune`` keys its table by the element
PREFILL_ACTS = (("e4m3 group", "e4m3", "group", False), ("int8 group ZPE", "int8", "group", True))
#: the configs also timed with int5 weights (before and after predeq, and the Gluon Hopper kernel)
PREFILL_INT5 = ("k64", w4.PREFILL_DEFAULT, "wgmma", "wgmmam64", "wgmmaws")


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64."""
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _rows(record, results: list, section: str, configs: dict, band: str, weights, pres, flops: float, meta: dict,
          ceil: dict, min_calls: int, zpe: bool = False, act: str = "e4m3 group") -> None:
    """Time each config; ``record(section, kernel, timing, **fields)`` writes a row; ``rel_vs_first``
    compares with the first config of this call (one activation format, one weight width)."""
    first = None
    kernel = f"w4a8 gemm int{weights[0].w.bits}"
    meta = {**meta, "act": act}
    for name, cfg in configs.items():
        try:
            calls = [partial(w4.gemm, *pre, wt.w, wt.bounds, zpe, band, cfg=cfg)
                     for wt, pre in zip(weights, pres, strict=True)]
            out = calls[0]()
            first = out if first is None else first
            t = graph_time(calls, min_calls=min_calls)
        except Exception as exc:  # noqa: BLE001 - a config that fails is recorded, the others still run
            results.append({"section": section, "kernel": f"{kernel} {name}", **meta,
                            "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        sec = t.best_us * 1e-6
        full = w4.config(meta["M"], meta["N"], meta["K"], band, False, cfg)
        tbps = weights[0].nbytes / sec / 1e12
        rate = (dict(frac_copy=tbps / ceil["copy_TBps"], frac_read=tbps / ceil["read_TBps"]) if band == "decode"
                else dict(frac_fp8_ceiling=flops / sec / 1e12 / ceil["fp8_TFLOPs"]))
        record(section, f"{kernel} {name}", t, **meta, splits=full["splits"], rel_vs_first=rel(out, first),
               weight_TBps=tbps, TFLOPs=flops / sec / 1e12, ablation=full["ablate"] != "none", **rate)


def pick(configs: dict, names: list[str] | None) -> dict:
    """``configs`` restricted to ``names`` (all when None); an unknown name raises."""
    if names is None:
        return configs
    if unknown := set(names) - configs.keys():
        raise ValueError(f"kernelbench: unknown configs {sorted(unknown)}; known {sorted(configs)}")
    return {n: configs[n] for n in configs if n in names}


def decode_variants(record, results: list, ceil: dict, ms: tuple[int, ...] = DECODE_M,
                    names: list[str] | None = None, bits: tuple[int, ...] = (4,)) -> None:
    """e4m3 per-group activations on every config (+ ablations); int8 per-group activations on the gemv configs
    and, as their tensor-core reference, on :data:`INT8_MMA` (gemv configs at M <= GEMV_BM_MAX); for each weight
    width in ``bits``."""
    ablations = {f"{n}:{ab}": {**w4.DECODE[n], "ablate": ab} for n, abl in ABLATE_CONFIGS.items() for ab in abl}
    configs = pick(w4.DECODE | ablations, names)
    by_act = {"e4m3": configs,
              "int8": {n: c for n, c in configs.items() if c["gemv"] or c["mma2"] or n == INT8_MMA}}
    for proj, b in ((p, b) for p in projections(1) for b in bits):
        if proj.name == "gdn.in_proj_ba":
            continue
        weights = [w4_weight(proj, b, seed=i) for i in range(copies_needed(w4_weight(proj, b, 0).nbytes))]
        for M in ms:
            x = activations(M, proj.K, seed=M)
            for act, named in by_act.items():
                if M > w4.GEMV_BM_MAX:
                    named = {n: c for n, c in named.items() if not c["gemv"]}
                if named:
                    meta = {"proj": proj.name, "M": M, "N": proj.N, "K": proj.K}
                    _rows(record, results, "decode_variants", named, "decode", weights,
                          [rotate_quant(x, wt, act) for wt in weights], 2 * M * proj.N * proj.K, meta, ceil, 64,
                          act=f"{act} group")
        del weights


def prefill_variants(record, results: list, ceil: dict, M: int = 2048, names: list[str] | None = None) -> None:
    configs = pick(w4.PREFILL, names)
    for proj in projections(1):
        if proj.name not in PREFILL_SHAPES:
            continue
        x = activations(M, proj.K, seed=M)
        meta = {"proj": proj.name, "M": M, "N": proj.N, "K": proj.K}
        for bits, cfgs in ((4, configs), (5, {n: c for n, c in configs.items() if n in PREFILL_INT5})):
            if not cfgs:
                continue
            wt = w4_weight(proj, bits, seed=0)
            for act, elem, gran, zpe in PREFILL_ACTS:
                runs = {n: c for n, c in cfgs.items()  # the library path: int4 weights, e4m3 activations only
                        if not (c.get("blockwise") and (bits != 4 or elem != "e4m3"))}
                _rows(record, results, "prefill_variants", runs, "prefill", [wt], [rotate_quant(x, wt, elem, gran)],
                      2 * M * proj.N * proj.K, meta, ceil, 8, zpe=zpe, act=act)
