"""Bench gates: KL of each tiny quantised format against the tiny reference, served; a mixbench smoke run.

The reference is the tiny Qwen3 served by the serve gates (``gates.serve.tiny_server``, fp32 weights
and activations, cached on ``ctx``); its prompt logprobs over the shipped corpora are collected once.
Each candidate — the same weights served with bf16 activations, and every format
``radiance_quant.build`` writes (served in fp32, so the KL is the weight format's) — is served in turn
beside the cached reference, compared over the whole vocabulary and stopped.
"""

from __future__ import annotations

import asyncio

from gates.core import Row, fmt
from gates.serve import tiny_model, tiny_server
from radiance_bench import kld, mixbench
from radiance_bench.client import Client
from radiance_bench.prompts import default_corpora, mixbench_categories
from radiance_quant.build import FORMATS, build
from radiance_vllm.server import VLLMServer

CHUNK_CHARS, MAX_CHUNKS, TOP_K = 600, 3, -1
#: Bars on mean KLD (nats) vs the fp32 reference, ~3x the values measured on the seed-0 tiny model
#: (bf16 1.2e-4, int5 0.0084, int4 0.030, mxfp4 0.033; the tiny model's bytes are deterministic).
KL_BARS = {"bf16": 1e-3, "int5": 0.03, "int4": 0.1, "mxfp4": 0.1}


def _chunks():
    return kld.chunk_corpora(default_corpora(), CHUNK_CHARS, MAX_CHUNKS)


async def _collect(url: str, model: str, chunks, keep_lookup: bool):
    async with Client(url, model, timeout=300, retries=1) as c:
        got = await kld.collect(c, chunks, TOP_K, 2, f"kld {model}", keep_lookup=keep_lookup, progress=False)
    bad = [g for g in got if isinstance(g, str)]
    if bad:
        raise RuntimeError(f"{model}: {len(bad)} chunks failed ({bad[0]})")
    return got


def _reference(ctx):
    server = tiny_server(ctx)
    return ctx.cached("bench:kld-ref", lambda: asyncio.run(_collect(server.url, server.model_name, _chunks(), False)))


def _candidate_dir(ctx, name: str):
    if name == "bf16":
        return tiny_model(ctx)
    out = ctx.workdir / f"tiny-qwen3-{name}"
    build(tiny_model(ctx), out, name, seed=0)
    return out


def _kl_row(ctx, name: str) -> list[Row]:
    refs = _reference(ctx)
    dtype = "bfloat16" if name == "bf16" else "float32"
    server = VLLMServer(
        _candidate_dir(ctx, name),
        ctx.workdir / f"server-bench-{name}",
        dtype=dtype,
        served_name=f"tiny-{name}",
        args=["--max-logprobs", "-1"],
    )
    with server:
        cands = asyncio.run(_collect(server.url, server.model_name, _chunks(), True))
    s, _ = kld.evaluate(_chunks(), refs, cands)
    ctx.cached("bench:kl", dict)[name] = s["mean_kld"]
    bar = KL_BARS[name]
    return [
        Row(
            f"bench: KL tiny {name} ({dtype} serve) vs tiny fp32",
            f"Mean KLD {fmt(s['mean_kld'])}, 99.9% {fmt(s['kld_99_9'])}, same top p {s['same_top_p']:.1%}",
            f"0 < mean ≤ {bar:g}",
            0 < s["mean_kld"] <= bar,
        )
    ]


def _mixbench_smoke(ctx) -> list[Row]:
    server = tiny_server(ctx)
    cats = mixbench_categories()

    async def go():
        async with Client(server.url, server.model_name, timeout=120, retries=1) as c:
            _, per_cat, combined = await mixbench.single_stream(c, cats, 32, 0.0, 0, progress=False)
            sweep = await mixbench.sweep(c, cats, [1, 4], 8, 32, 0.0, 0, progress=False)
            return per_cat, combined, sweep, c.stats()

    per_cat, combined, sweep, stats = asyncio.run(go())
    errors = sum(stats["errors"].values())
    ok = combined is not None and all(c["decode_tok_s"] for c in per_cat) and errors == 0
    agg = ", ".join(f"c{r['concurrency']} {fmt(r['aggregate_tok_s'])}" for r in sweep)
    return [
        Row(
            "bench: mixbench smoke (8 categories, conc 1/4)",
            f"combined {fmt(combined)} tok/s; {agg}; {errors} errors",
            "all categories rated, 0 errors",
            ok,
        )
    ]


def _ordering(ctx) -> list[Row]:
    kl = ctx.cached("bench:kl", dict)
    if not {"int4", "int5"} <= kl.keys():
        raise RuntimeError(f"KL of int4/int5 not measured: {kl}")
    return [
        Row(
            "bench: KL int5 < KL int4 (one more bit per weight)",
            f"{fmt(kl['int5'])} vs {fmt(kl['int4'])}",
            "int5 < int4",
            kl["int5"] < kl["int4"],
        )
    ]


def gates(ctx):
    yield "bench mixbench smoke", lambda: _mixbench_smoke(ctx)
    for name in ["bf16", *FORMATS]:
        yield f"bench kl {name}", lambda name=name: _kl_row(ctx, name)
    yield "bench kl ordering", lambda: _ordering(ctx)
