"""Served evaluation: acceptance from a running vLLM server's spec-decode counters, per source.

Prompts run one at a time (single stream) at the served sampling settings with the per-prompt seed;
``/metrics`` is read before and after each request, so every prompt's counter deltas are its own:
``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``
and ``..._num_accepted_tokens_per_pos_total{position=k}``. Figures: acceptance per draft
(accepted / drafts), tokens per update (1 + that), per-token acceptance (accepted / draft tokens),
per-position acceptance (accepted at k / drafts) and tokens/s (completion tokens / request wall time).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path

import httpx

from radiance_drafter.prompts import Prompt, prompt_seed
from radiance_drafter.target import Sampling, prompt_ids

PREFIX = "vllm:spec_decode_num_"
_LINE = re.compile(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$')


def read_counters(text: str) -> dict:
    """Spec-decode counters (``drafts``, ``draft_tokens``, ``accepted_tokens``, ``pos/k``) and
    ``generation_tokens``, each summed over label sets."""
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or not m[1].endswith("_total"):
            continue
        if m[1] == "vllm:generation_tokens_total":
            out["generation_tokens"] += float(m[3])
        elif m[1].startswith(PREFIX):
            name = m[1].removeprefix(PREFIX).removesuffix("_total")
            pos = re.search(r'position="(\d+)"', m[2] or "")
            out[f"pos/{pos[1]}" if pos and name.endswith("per_pos") else name] += float(m[3])
    return dict(out)


def _delta(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}


def figures(c: dict, tokens: int, seconds: float, k: int) -> dict:
    drafts = c.get("drafts", 0.0)
    acc = c.get("accepted_tokens", 0.0)
    return {"drafts": int(drafts), "draft_tokens": int(c.get("draft_tokens", 0.0)), "accepted_tokens": int(acc),
            "completion_tokens": tokens, "seconds": round(seconds, 3),
            "acc_per_draft": acc / drafts if drafts else 0.0,
            "tokens_per_update": 1 + acc / drafts if drafts else 1.0,
            "accept_rate": acc / c["draft_tokens"] if c.get("draft_tokens") else 0.0,
            "accept_rate_by_pos": [c.get(f"pos/{i}", 0.0) / drafts if drafts else 0.0 for i in range(k)],
            "tokens_per_s": tokens / seconds if seconds else 0.0}


class ServedEval:
    def __init__(self, url: str, model: str, tokenizer_dir: str | Path, timeout: float = 600.0):
        from transformers import AutoTokenizer

        self.url, self.model = url.rstrip("/"), model
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self.client = httpx.Client(timeout=timeout)

    def counters(self) -> dict:
        r = self.client.get(f"{self.url}/metrics")
        r.raise_for_status()
        return read_counters(r.text)

    def _settled(self, before: dict, tokens: int, deadline_s: float = 10.0) -> dict:
        """Counters once the request's generated tokens are reflected (stats arrive asynchronously)."""
        end = time.monotonic() + deadline_s
        while True:
            after = self.counters()
            if after.get("generation_tokens", 0) - before.get("generation_tokens", 0) >= tokens \
                    or time.monotonic() > end:
                return after
            time.sleep(0.1)

    def run(self, prompts: list[Prompt], sampling: Sampling, label: str) -> dict:
        """Evaluate ``prompts`` in order; returns the result dict (config, per prompt, per source, overall)."""
        rows, k = [], None
        for p in prompts:
            ids = prompt_ids(self.tokenizer, p)
            body = {"model": self.model, "prompt": ids, "max_tokens": sampling.max_tokens,
                    "temperature": sampling.temperature, "top_p": sampling.top_p,
                    "seed": prompt_seed(sampling.seed, p.id)}
            if sampling.top_k:
                body["top_k"] = sampling.top_k
            before = self.counters()
            t0 = time.monotonic()
            r = self.client.post(f"{self.url}/v1/completions", json=body)
            seconds = time.monotonic() - t0
            r.raise_for_status()
            tokens = r.json()["usage"]["completion_tokens"]
            d = _delta(self._settled(before, tokens), before)
            k = max([k or 0] + [int(x.split("/")[1]) + 1 for x in d if x.startswith("pos/")])
            rows.append({"id": p.id, "source": p.source, "tokens": tokens, "seconds": seconds, "counters": d})
        return aggregate(rows, k or 0, {"kind": "served", "label": label, "url": self.url, "model": self.model,
                                        "sampling": sampling.asdict(), "prompt_ids": [p.id for p in prompts]})


def aggregate(rows: list[dict], k: int, meta: dict) -> dict:
    def fold(rs):
        c: dict[str, float] = defaultdict(float)
        for r in rs:
            for key, v in r["counters"].items():
                c[key] += v
        return figures(c, sum(r["tokens"] for r in rs), sum(r["seconds"] for r in rs), k)

    by_source: dict[str, list] = defaultdict(list)
    for r in rows:
        by_source[r["source"]].append(r)
    return {**meta, "draft_tokens_per_step": k, **fold(rows),
            "per_source": {s: fold(rs) for s, rs in sorted(by_source.items())},
            "per_prompt": [{"id": r["id"], "source": r["source"], **figures(r["counters"], r["tokens"],
                                                                             r["seconds"], k)} for r in rows]}
