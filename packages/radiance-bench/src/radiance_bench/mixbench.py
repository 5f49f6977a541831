"""Mixbench: eight shipped prompt categories, single-stream decode by category, a concurrency sweep.

Single stream: every prompt once, one at a time, through the chat template. A category's decode rate
is Σ(completion tokens − 1) / Σ(decode time) over its prompts (engine-side decode time from /metrics
where the server exports it, else the streamed chunks' span; see `perf`); the combined rate is the
category-weighted mean Σ_c w_c · rate_c (weights shipped with the prompts, normalised to 1).
Sweep: at each concurrency c, ``max(requests, 2c)`` requests (prompts cycled) with c in flight;
aggregate tok/s = completion tokens / wall time, and TTFT, TPOT, ITL p50/p90 as vLLM names them
(client side, from the stream), plus the engine-side mean TPOT from /metrics where available (the
client-side TPOT/ITL are distorted when the API server merges steps into one chunk).
"""

from __future__ import annotations

import time

from radiance_bench.client import Client, gather_bounded
from radiance_bench.perf import decode_rate, engine_delta, snapshot
from radiance_bench.stats import latency_summary


def flat_prompts(categories: dict) -> list[dict]:
    return [{"category": c, **p} for c, cat in categories.items() for p in cat["prompts"]]


def _payload(client: Client, prompt: dict, max_tokens: int, temperature: float, seed: int) -> dict:
    return {
        "model": client.model,
        "messages": [{"role": "user", "content": prompt["content"]}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
    }


async def single_stream(
    client: Client, categories: dict, max_tokens: int, temperature: float, seed: int, progress: bool = True
) -> tuple[list[dict], list[dict], float | None]:
    """(per-prompt rows, per-category rows, combined weighted decode tok/s)."""

    async def one(p):
        before = await snapshot(client)
        out = await client.stream("/v1/chat/completions", _payload(client, p, max_tokens, temperature, seed))
        row = {"id": p["id"], "category": p["category"], **decode_rate(out)}
        engine = engine_delta(before, await snapshot(client))
        if engine and engine["decode_tok_s"]:
            tokens, secs = engine["generation_tokens"] - engine["requests"], engine["decode_s"]
            row |= {"stream_decode_tok_s": row["decode_tok_s"], "decode_tok_s": tokens / secs, "decode_s": secs}
        return row | {"timing": "engine" if engine and engine["decode_tok_s"] else "stream"}

    rows = await gather_bounded(flat_prompts(categories), one, 1, "mixbench single", progress)
    cats = []
    for name, cat in categories.items():
        mine = [r for r in rows if r["category"] == name]
        rated = [r for r in mine if r["decode_tok_s"]]
        secs = sum(r["decode_s"] for r in rated)
        cats.append(
            {
                "category": name,
                "weight": cat["weight"],
                "prompts": len(mine),
                "errors": sum(r["error"] is not None for r in mine),
                "decode_tok_s": sum(r["completion_tokens"] - 1 for r in rated) / secs if secs > 0 else None,
                **latency_summary("ttft", [r["ttft_ms"] / 1e3 for r in rated if r["ttft_ms"]], (50,)),
            }
        )
    rated = [c for c in cats if c["decode_tok_s"] is not None]
    wsum = sum(c["weight"] for c in rated)
    combined = sum(c["weight"] * c["decode_tok_s"] for c in rated) / wsum if wsum else None
    return rows, cats, combined


async def sweep(
    client: Client,
    categories: dict,
    levels: list[int],
    requests: int,
    max_tokens: int,
    temperature: float,
    seed: int,
    progress: bool = True,
) -> list[dict]:
    """One row per concurrency level."""
    prompts = flat_prompts(categories)
    rows = []
    for c in levels:
        n = max(requests, 2 * c)
        batch = [prompts[i % len(prompts)] for i in range(n)]
        before = await snapshot(client)
        t0 = time.perf_counter()
        outs = await gather_bounded(
            batch,
            lambda p: client.stream("/v1/chat/completions", _payload(client, p, max_tokens, temperature, seed)),
            c,
            f"mixbench conc {c}",
            progress,
        )
        wall = time.perf_counter() - t0
        engine = engine_delta(before, await snapshot(client))
        decoded = engine["generation_tokens"] - engine["requests"] if engine else 0
        ok = [o for o in outs if o.ok]
        toks = sum(o.completion_tokens or 0 for o in ok)
        rows.append(
            {
                "concurrency": c,
                "requests": n,
                "errors": n - len(ok),
                "wall_s": wall,
                "output_tokens": toks,
                "aggregate_tok_s": toks / wall if wall > 0 else None,
                "request_throughput": len(ok) / wall if wall > 0 else None,
                **latency_summary("ttft", [o.ttft for o in ok], (50, 90)),
                **latency_summary("tpot", [o.tpot for o in ok], (50, 90)),
                **latency_summary("itl", [g for o in ok for g in o.itl], (50, 90)),
                "engine_tpot_ms_mean": 1e3 * engine["decode_s"] / decoded if decoded > 0 else None,
            }
        )
    return rows
