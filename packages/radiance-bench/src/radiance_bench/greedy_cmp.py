"""Greedy completions hashed across runs, with a self-consistency control.

The same prompts go to the server ``runs`` times (temperature 0, fixed seed). Within one server, runs
that disagree show scheduler/batching noise (the self-consistency control); across two results
(``compare``), a prompt differs only when the other build's hash matches none of this one's.
"""

from __future__ import annotations

import hashlib

from radiance_bench.client import Client, gather_bounded


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


async def run(
    client: Client,
    prompts: list[dict],
    runs: int,
    max_tokens: int,
    seed: int,
    concurrency: int,
    progress: bool = True,
) -> list[dict]:
    """Per prompt: the hash of each run's completion (None on error) and whether all runs agree."""
    hashes: dict[str, list] = {p["id"]: [] for p in prompts}
    tokens: dict[str, list] = {p["id"]: [] for p in prompts}
    for r in range(runs):

        async def one(p):
            return await client.post(
                "/v1/chat/completions",
                {
                    "model": client.model,
                    "messages": [{"role": "user", "content": p["content"]}],
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "seed": seed,
                },
            )

        outs = await gather_bounded(prompts, one, concurrency, f"greedy-cmp run {r + 1}/{runs}", progress)
        for p, out in zip(prompts, outs, strict=True):
            hashes[p["id"]].append(text_hash(out.text) if out.ok else None)
            tokens[p["id"]].append(out.completion_tokens)
    return [
        {
            "id": pid,
            "hashes": h,
            "completion_tokens": tokens[pid],
            "consistent": None not in h and len(set(h)) == 1,
        }
        for pid, h in hashes.items()
    ]


def summarise(items: list[dict], runs: int) -> dict:
    n = len(items)
    k = sum(i["consistent"] for i in items)
    return {
        "prompts": n,
        "runs": runs,
        "self_consistent": k,
        "self_consistency": k / n if n else None,
        "errored": sum(h is None for i in items for h in i["hashes"]),
    }


def cross(a: dict, b: dict) -> list[dict]:
    """Per prompt of two greedy-cmp results: same (hash sets meet), or differs, with each side's control."""
    bmap = {i["id"]: i for i in b["items"]}
    rows = []
    for i in a["items"]:
        j = bmap.get(i["id"])
        if j is None:
            continue
        ha, hb = {h for h in i["hashes"] if h}, {h for h in j["hashes"] if h}
        rows.append(
            {
                "id": i["id"],
                "a": i["hashes"],
                "b": j["hashes"],
                "same": bool(ha & hb),
                "a_consistent": i["consistent"],
                "b_consistent": j["consistent"],
            }
        )
    return rows
