"""Timing over streamed completions and vLLM's /metrics: decode at context lengths, prefill sweeps.

Client side, decode tok/s is (completion tokens − 1) / (last content chunk − first content chunk) and
TTFT the first chunk's arrival. An API server that lags merges several engine steps into one chunk,
which makes client-side rates meaningless (seen on a loaded 2-core box), so where the server exports
vLLM's request histograms the rates come from the engine side instead, as deltas over the interval:
decode tok/s = Δ(generation tokens − requests) / Δ request_decode_time, prefill tok/s =
Δ prefill_kv_computed_tokens / Δ request_prefill_time (tokens actually computed: prompt tokens minus
prefix-cache hits, which are reported). ms/step = 1000 · tokens-per-update / decode tok/s, tokens per
update = 1 + accepted/drafts from the spec-decode counters (1 without speculation).
"""

from __future__ import annotations

import secrets

import numpy as np

from radiance_bench.client import Client, Outcome, metric_sum
from radiance_bench.console import progress_bar
from radiance_bench.prompts import Filler

SPEC = "vllm:spec_decode_num_"
#: Random leading tokens per prefill request: no two requests share a prefix-cache block.
UNIQUE_PREFIX = 32
ENGINE = {
    "requests": "vllm:request_decode_time_seconds_count",
    "decode_s": "vllm:request_decode_time_seconds_sum",
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "generation_tokens": "vllm:request_generation_tokens_sum",
    "prompt_tokens": "vllm:request_prompt_tokens_sum",
    "computed_tokens": "vllm:request_prefill_kv_computed_tokens_sum",
}


def parse_lengths(spec: str, limit: int | None, reserve: int) -> tuple[list[int], list[int]]:
    """'25,8192,max' → (lengths that fit ``limit − reserve``, lengths skipped); 'max' = the limit."""
    keep, skipped = [], []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part == "max":
            if limit is None:
                raise ValueError("'max' context needs the server to report max_model_len")
            n = limit - reserve
        else:
            n = int(part.lower().replace("k", "")) * (1024 if part.lower().endswith("k") else 1)
        (keep if limit is None or n + reserve <= limit else skipped).append(n)
    if not keep:
        raise ValueError(f"no length in {spec!r} fits the server's max_model_len {limit} (with {reserve} reserved)")
    return keep, skipped


def decode_rate(out: Outcome) -> dict:
    """Decode tok/s, decode seconds and TTFT of one streamed completion."""
    span = out.chunk_times[-1] - out.chunk_times[0] if len(out.chunk_times) > 1 else 0.0
    toks = (out.completion_tokens or 0) - 1
    return {
        "decode_tok_s": toks / span if span > 0 and toks > 0 else None,
        "decode_s": span,
        "ttft_ms": out.ttft * 1e3 if out.ttft is not None else None,
        "completion_tokens": out.completion_tokens,
        "error": out.error,
    }


def spec_counters(metrics: dict | None) -> dict | None:
    """The spec-decode counters of vLLM's /metrics (None when the server exposes none)."""
    if not metrics:
        return None
    names = ("drafts", "draft_tokens", "accepted_tokens")
    vals = {n: metric_sum(metrics, f"{SPEC}{n}_total") for n in names}
    if all(v is None for v in vals.values()):
        return None
    per_pos, k = [], 0
    while (v := metric_sum(metrics, f"{SPEC}accepted_tokens_per_pos_total", position=str(k))) is not None:
        per_pos.append(v)
        k += 1
    return {**{n: v or 0.0 for n, v in vals.items()}, "per_pos": per_pos}


def spec_delta(before: dict | None, after: dict | None) -> dict | None:
    """Acceptance over an interval: accepted per draft (acc/draft), tokens per update (1 + acc/draft),
    acceptance rate (accepted / drafted tokens) and the per-position acceptance rates."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted_tokens")}
    pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"], strict=False)]
    if d["drafts"] <= 0:
        return {**d, "acceptance_per_draft": None, "tokens_per_update": None, "acceptance_rate": None}
    return {
        **d,
        "acceptance_per_draft": d["accepted_tokens"] / d["drafts"],
        "tokens_per_update": 1 + d["accepted_tokens"] / d["drafts"],
        "acceptance_rate": d["accepted_tokens"] / d["draft_tokens"] if d["draft_tokens"] else None,
        "acceptance_per_pos": [p / d["drafts"] for p in pos],
    }


def engine_counters(metrics: dict | None) -> dict | None:
    """vLLM's per-request histogram sums (engine-side timestamps); None when any is missing."""
    if not metrics:
        return None
    vals = {k: metric_sum(metrics, name) for k, name in ENGINE.items()}
    return None if any(v is None for v in vals.values()) else vals


async def snapshot(client: Client) -> dict:
    """Spec-decode and engine counters from one /metrics read (values None where absent)."""
    m = await client.metrics()
    return {"spec": spec_counters(m), "engine": engine_counters(m)}


def engine_delta(before: dict, after: dict) -> dict | None:
    """Engine-side rates over an interval between two snapshots."""
    if before["engine"] is None or after["engine"] is None:
        return None
    d = {k: after["engine"][k] - before["engine"][k] for k in ENGINE}
    decoded = d["generation_tokens"] - d["requests"]
    return {
        **d,
        "decode_tok_s": decoded / d["decode_s"] if d["decode_s"] > 0 and decoded > 0 else None,
        "prefill_tok_s": d["computed_tokens"] / d["prefill_s"] if d["prefill_s"] > 0 else None,
        "prefix_cache_hit_tokens": d["prompt_tokens"] - d["computed_tokens"],
    }


def _mean(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(v)) if v else None


async def decode_ctx(
    client: Client,
    filler: Filler,
    lengths: list[int],
    max_tokens: int,
    temperature: float,
    seed: int,
    repeats: int,
    ignore_eos: bool,
    progress: bool = True,
) -> list[dict]:
    """Single-stream decode at each context length: one row per length (over ``repeats`` requests)."""
    rows = []
    with progress_bar(progress) as bar:
        task = bar.add_task("decode-ctx", total=len(lengths) * repeats)
        for n in lengths:
            prompt = filler.prompt(n, seed)
            before = await snapshot(client)
            runs = []
            for _ in range(repeats):
                payload = {
                    "model": client.model,
                    "prompt": prompt,
                    "max_tokens": max_tokens,
                    "temperature": temperature,
                    "seed": seed,
                    "ignore_eos": ignore_eos,
                }
                out = await client.stream("/v1/completions", payload)
                runs.append(decode_rate(out) | {"prompt_tokens": out.prompt_tokens})
                bar.advance(task)
            after = await snapshot(client)
            ok = [r for r in runs if r["error"] is None]
            spec = spec_delta(before["spec"], after["spec"])
            engine = engine_delta(before, after)
            per_update = (spec or {}).get("tokens_per_update") or 1.0
            stream_rate = _mean(ok, "decode_tok_s")
            rate = (engine or {}).get("decode_tok_s") or stream_rate
            rows.append(
                {
                    "context": n,
                    "prompt_tokens": runs[0]["prompt_tokens"],
                    "runs": runs,
                    "errors": len(runs) - len(ok),
                    "spec_decode": spec,
                    "engine": engine,
                    "timing": "engine" if engine and engine["decode_tok_s"] else "stream",
                    "decode_tok_s": rate,
                    "stream_decode_tok_s": stream_rate,
                    "tokens_per_update": per_update,
                    "ms_per_step": 1e3 * per_update / rate if rate else None,
                    "ttft_ms": _mean(ok, "ttft_ms"),
                }
            )
    return rows


async def prefill(
    client: Client,
    filler: Filler,
    lengths: list[int],
    repeats: int,
    seed: int,
    unique: int = UNIQUE_PREFIX,
    progress: bool = True,
) -> list[dict]:
    """Prompt processing at each length: TTFT and prefill tok/s, one token generated per request.

    Every request starts with ``unique`` random tokens from a fresh salt, so the prefix cache never
    serves a block (within this run or from an earlier one); a warm-up request precedes the sweep.
    """
    salt = secrets.randbits(62)
    counter = iter(range(1 << 30))

    async def one(n: int) -> Outcome:
        prompt = filler.prompt(n, seed, unique=unique, nonce=salt + next(counter))
        return await client.stream(
            "/v1/completions", {"model": client.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
        )

    await one(min(lengths))
    rows = []
    with progress_bar(progress) as bar:
        task = bar.add_task("prefill", total=len(lengths) * repeats)
        for n in lengths:
            before = await snapshot(client)
            runs = []
            for _ in range(repeats):
                out = await one(n)
                ttft = out.ttft if out.ok else None
                runs.append(
                    {
                        "ttft_ms": ttft * 1e3 if ttft else None,
                        "prompt_tokens": out.prompt_tokens,
                        "stream_tok_s": out.prompt_tokens / ttft if ttft else None,
                        "error": out.error,
                    }
                )
                bar.advance(task)
            engine = engine_delta(before, await snapshot(client))
            ok = [r for r in runs if r["error"] is None]
            stream_rate = _mean(ok, "stream_tok_s")
            rate = (engine or {}).get("prefill_tok_s") or stream_rate
            rows.append(
                {
                    "length": n,
                    "runs": runs,
                    "errors": len(runs) - len(ok),
                    "engine": engine,
                    "timing": "engine" if engine and engine["prefill_tok_s"] else "stream",
                    "prefill_tok_s": rate,
                    "stream_prefill_tok_s": stream_rate,
                    "prefix_cache_hit_tokens": (engine or {}).get("prefix_cache_hit_tokens"),
                    "ttft_ms": _mean(ok, "ttft_ms"),
                    "ttft_ms_min": min((r["ttft_ms"] for r in ok), default=None),
                }
            )
    return rows
