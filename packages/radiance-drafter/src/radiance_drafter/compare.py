"""The promote rule: compare a candidate drafter with the baseline on the same held-out evaluation.

Built from the seeds' lesson (fine-tunes that won on captured prompts and on small stochastic benches
lost on held-out traffic): no verdict unless both evaluations cover at least ``min_tokens`` completion
tokens (default 50k), ran the same prompts at the same sampling settings; the report is per source
(wins / losses / ties beyond ``tie`` relative), not one average. Promote only if the overall metric
rises by at least ``min_gain`` (relative) AND the candidate wins more sources than it loses.
Metric: ``acc_per_draft`` (served, or the offline proxy's decode walk).
"""

from __future__ import annotations

METRICS = {"served": "acc_per_draft", "offline_proxy": "acc_per_draft"}


def _rel(c: float, b: float) -> float:
    return (c - b) / b if b else (0.0 if c == b else float("inf") if c > b else float("-inf"))


def compare(baseline: dict, candidate: dict, min_tokens: int = 50_000, min_gain: float = 0.02,
            tie: float = 0.005) -> dict:
    kind = baseline.get("kind")
    if kind not in METRICS or candidate.get("kind") != kind:
        raise ValueError(f"both results must be of one kind in {list(METRICS)}; got {kind!r} and "
                         f"{candidate.get('kind')!r}")
    metric = METRICS[kind]
    refusals = [f"{name} covers {r['completion_tokens']} completion tokens < {min_tokens}"
                for name, r in (("baseline", baseline), ("candidate", candidate))
                if r["completion_tokens"] < min_tokens]
    for key in ("sampling", "prompt_ids", "temperature"):
        if baseline.get(key) != candidate.get(key):
            refusals.append(f"the two evaluations differ in {key!r}")
    rows, wins, losses = [], 0, 0
    for src in sorted(set(baseline["per_source"]) | set(candidate["per_source"])):
        b = baseline["per_source"].get(src, {}).get(metric)
        c = candidate["per_source"].get(src, {}).get(metric)
        if b is None or c is None:
            refusals.append(f"source {src!r} is missing from one evaluation")
            continue
        rel = _rel(c, b)
        outcome = "win" if rel > tie else "loss" if rel < -tie else "tie"
        wins += outcome == "win"
        losses += outcome == "loss"
        rows.append({"source": src, "baseline": b, "candidate": c, "rel": rel, "outcome": outcome,
                     "tokens": candidate["per_source"][src]["completion_tokens"]})
    gain = _rel(candidate[metric], baseline[metric])
    if refusals:
        verdict = "refused"
    elif gain >= min_gain and wins > losses:
        verdict = "promote"
    else:
        verdict = "keep-baseline"
    return {"metric": metric, "baseline": baseline[metric], "candidate": candidate[metric], "gain": gain,
            "wins": wins, "losses": losses, "ties": len(rows) - wins - losses, "per_source": rows,
            "verdict": verdict, "refusals": refusals, "min_tokens": min_tokens, "min_gain": min_gain}
