"""A/B section ``decode_pairs``: each decode GEMM whose output one of our producers reads, timed *with* that producer —
the form the chained stack and the served plugin run it in — per named config, the GEMM leaving its split partials.

The decode table was tuned on GEMMs timed alone, with their split reduction in the kernel. Deferred, a split costs
the GEMM only its partial's store and the producer one more L2 load per element, and the producer's launch sits on
the GEMM's tail: the best config may differ (H200 call 105: gate_up → silu·mul at M = 8 was faster at 3 splits than
at the table's 2). Pairs (:data:`PAIRS`): o_proj → add+RMSNorm (gate_up's rotate+quant), gate_up → silu·mul
(down's), down → add+RMSNorm (the next layer's qkv, P = 3); out_proj has o_proj's shape (and producer). Every row is
the pair over DRAM-fed weight copies in one CUDA graph; the reduced table pick is also timed reduced (``defer``
False, ``reduced``: it sums its splits in the kernel and hands that fp32 sum to the producer as the one partial).
``rel_vs_reduced``: the partials' sum in split order (what the producer reads) against the reduced pick's output —
split counts differ, so up to bf16 rounding, never a check of bits. :mod:`.tune` makes each key's winner the table's
``defer`` entry (:mod:`radiance_kernels.ops.w4a8_gemm.tuned`), marked ``reduced`` where the reduced pick won.
"""

from __future__ import annotations

from functools import partial

import torch

from radiance_bench.kernelbench.cases import activations, rotate_quant, w4_weight
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_bench.kernelbench.variants import DECODE_M, pick, rel
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.stream.reference import activation
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import projections

#: (GEMM projection, its producer, partitions of the linear that producer feeds)
PAIRS = (("attn.o_proj", "add_rms_gemma", 2), ("mlp.gate_up", "silu_mul", 1), ("mlp.down", "add_rms_gemma", 3))
EPS = 1e-6


def consumer(producer: str, M: int, K: int, p_next: int, elem: str):
    """The producer on a GEMM output ``y`` (bf16 [M, N] or split partials [S, M, N]) of width ``K`` (silu·mul: 2K),
    ending in the next linear's rotate+quant (``elem``, per-group)."""
    ops = torch.ops.radiance
    recs = (*random_rotations(p_next, K, seed=1, device="cuda"), elem, "group", "triton")
    if producer == "silu_mul":
        return lambda y: ops.gated_rotate_quant("silu_mul", y[..., K:], y[..., :K], None, EPS, *recs)
    resid, gw = activations(M, K, seed=2), activations(1, K, seed=3)[0]
    return lambda y: ops.add_rms_norm_rotate_quant(y, resid, gw, EPS, True, *recs)


def candidates(act: str, reduced: str, names: list[str] | None) -> list[str]:
    """The ring configs that run this activation element (8-bit MMA operands for int8, fp16 for e4m3: the kinds the
    table ever picked; only ``names`` where given) and the reduced pick, in :data:`w4.DECODE` order."""
    ok = {n for n, c in pick(w4.DECODE, names).items() if c["ring"] and c["k8"] == (act == "int8")} | {reduced}
    return [n for n in w4.DECODE if n in ok]


def decode_pairs(record, results: list, ms: tuple[int, ...] = DECODE_M, names: list[str] | None = None,
                 bits: tuple[int, ...] = (4,)) -> None:
    """Time every candidate config deferred, and the reduced pick reduced, per pair, M, activation element, width."""
    projs = {p.name: p for p in projections(1)}
    gpu = torch.cuda.get_device_name()
    for (name, producer, p_next), b in ((pr, b) for pr in PAIRS for b in bits):
        proj = projs[name]
        weights = [w4_weight(proj, b, seed=i) for i in range(copies_needed(w4_weight(proj, b, 0).nbytes))]
        width = proj.N // 2 if producer == "silu_mul" else proj.N
        for M, act in ((M, act) for M in ms for act in ("e4m3", "int8")):
            x = activations(M, proj.K, seed=M)
            pres = [rotate_quant(x, wt, act) for wt in weights]
            consume = consumer(producer, M, width, p_next, act)
            reduced = tuned.pick(gpu, "w4a8_gemm", "decode", M, proj.N, proj.K, act, b) or \
                (w4.GEMV_DEFAULT if M <= w4.GEMV_MAX_M else w4.DECODE_DEFAULT)  # the band's default, by name
            meta = {"proj": name, "producer": producer, "M": M, "N": proj.N, "K": proj.K, "act": f"{act} group"}
            ref = None
            for cfg_name, defer in [(reduced, False)] + [(n, True) for n in candidates(act, reduced, names)]:
                kernel, cfg = f"w4a8 gemm int{b} {cfg_name}", w4.DECODE[cfg_name]
                form = {"defer": defer, "reduced": not defer}
                try:
                    out = activation(_gemm(weights[0], pres[0], cfg, defer))
                    t = graph_time([partial(pair, consume, wt, pre, cfg, defer)
                                    for wt, pre in zip(weights, pres, strict=True)])
                except Exception as exc:  # noqa: BLE001 - a config that fails is recorded, the others still run
                    results.append({"section": "decode_pairs", "kernel": kernel, **meta, **form,
                                    "error": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                ref = out if ref is None else ref
                record("decode_pairs", kernel, t, **meta, **form,
                       splits=w4.config(M, proj.N, proj.K, "decode", False, cfg)["splits"],
                       rel_vs_reduced=rel(out, ref))
        del weights


def _gemm(wt, pre, cfg, defer):
    """The GEMM's partials form: its split partials (``defer``), or its in-kernel sum as the one partial."""
    return w4.gemm(*pre, wt.w, wt.bounds, False, "decode", cfg=cfg, defer=True, reduced=not defer)


def pair(consume, wt, pre, cfg, defer):
    """``consume`` of the GEMM on ``pre`` in its partials form (:func:`_gemm`)."""
    return consume(_gemm(wt, pre, cfg, defer))
