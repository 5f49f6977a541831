"""Timing runs over streamed completions: decode at context lengths, prefill sweeps, spec-decode deltas.

Streaming gives one content chunk per engine step (several tokens per chunk under speculative
decoding): ms/step is the mean gap between chunks after the first, decode tok/s is
(completion tokens − 1) / (last chunk − first chunk), and TTFT is the first chunk's arrival.
"""

from __future__ import annotations

import secrets

import numpy as np

from radiance_bench.client import Client, Outcome, metric_sum
from radiance_bench.console import progress_bar
from radiance_bench.prompts import Filler

SPEC = "vllm:spec_decode_num_"


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
    return keep, skipped


def decode_rate(out: Outcome) -> dict:
    """ms/step, tokens/step and decode tok/s of one streamed completion."""
    steps = len(out.chunk_times) - 1
    span = out.chunk_times[-1] - out.chunk_times[0] if steps > 0 else 0.0
    toks = (out.completion_tokens or 0) - 1
    return {
        "ms_per_step": span / steps * 1e3 if steps > 0 else None,
        "tokens_per_step": toks / steps if steps > 0 else None,
        "decode_tok_s": toks / span if span > 0 else None,
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
    """Single-stream decode at each context length: one row per length (means over ``repeats``);
    the spec-decode counters are read before and after each length."""
    rows = []
    with progress_bar(progress) as bar:
        task = bar.add_task("decode-ctx", total=len(lengths) * repeats)
        for n in lengths:
            prompt = filler.prompt(n, seed)
            before = spec_counters(await client.metrics())
            runs = []
            for _ in range(repeats):
                out = await client.stream(
                    "/v1/completions",
                    {
                        "model": client.model,
                        "prompt": prompt,
                        "max_tokens": max_tokens,
                        "temperature": temperature,
                        "seed": seed,
                        "ignore_eos": ignore_eos,
                    },
                )
                runs.append(decode_rate(out) | {"prompt_tokens": out.prompt_tokens})
                bar.advance(task)
            ok = [r for r in runs if r["error"] is None]
            rows.append(
                {
                    "context": n,
                    "prompt_tokens": runs[0]["prompt_tokens"],
                    "runs": runs,
                    "errors": len(runs) - len(ok),
                    "spec_decode": spec_delta(before, spec_counters(await client.metrics())),
                    **{
                        k: _mean(ok, k) for k in ("ms_per_step", "tokens_per_step", "decode_tok_s", "ttft_ms")
                    },
                }
            )
    return rows


async def prefill(
    client: Client,
    filler: Filler,
    lengths: list[int],
    repeats: int,
    seed: int,
    unique: int = 32,
    progress: bool = True,
) -> list[dict]:
    """Prompt processing at each length: TTFT and prompt tokens / TTFT, one token generated.

    Every request starts with ``unique`` random tokens from a fresh salt, so the prefix cache never
    serves a block (within this run or from an earlier one); a warm-up request precedes the sweep.
    """
    salt = secrets.randbits(62)
    counter = iter(range(1 << 30))

    async def one(n: int) -> Outcome:
        return await client.stream(
            "/v1/completions",
            {
                "model": client.model,
                "prompt": filler.prompt(n, seed, unique=unique, nonce=salt + next(counter)),
                "max_tokens": 1,
                "temperature": 0.0,
            },
        )

    await one(min(lengths))
    rows = []
    with progress_bar(progress) as bar:
        task = bar.add_task("prefill", total=len(lengths) * repeats)
        for n in lengths:
            runs = []
            for _ in range(repeats):
                out = await one(n)
                runs.append(
                    {
                        "ttft_ms": out.ttft * 1e3 if out.ttft else None,
                        "prompt_tokens": out.prompt_tokens,
                        "prefill_tok_s": out.prompt_tokens / out.ttft if out.ok and out.ttft else None,
                        "error": out.error,
                    }
                )
                bar.advance(task)
            ok = [r for r in runs if r["error"] is None]
            rows.append(
                {
                    "length": n,
                    "runs": runs,
                    "errors": len(runs) - len(ok),
                    "ttft_ms": _mean(ok, "ttft_ms"),
                    "prefill_tok_s": _mean(ok, "prefill_tok_s"),
                    "ttft_ms_min": min((r["ttft_ms"] for r in ok), default=None),
                }
            )
    return rows
