"""Prompt sets: JSONL records ``{"id", "source", "messages" | "prompt"}`` and the held-out split.

The held-out set is drawn round-robin over the sources (each source in turn gives its next prompt in
a seeded shuffle), so every source is represented; the rest is the training set.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prompt:
    id: str
    source: str
    messages: tuple[dict, ...] | None = None
    prompt: str | None = None

    def to_json(self) -> dict:
        d = {"id": self.id, "source": self.source}
        if self.messages is not None:
            d["messages"] = list(self.messages)
        else:
            d["prompt"] = self.prompt
        return d


def load_prompts(path: str | Path) -> list[Prompt]:
    out, seen = [], set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        if "id" not in r or "source" not in r or ("messages" in r) == ("prompt" in r):
            raise ValueError(f"{path}:{n}: need 'id', 'source' and exactly one of 'messages' / 'prompt'")
        if r["id"] in seen:
            raise ValueError(f"{path}:{n}: duplicate id {r['id']!r}")
        seen.add(r["id"])
        msgs = tuple(r["messages"]) if "messages" in r else None
        out.append(Prompt(str(r["id"]), str(r["source"]), msgs, r.get("prompt")))
    return out


def write_prompts(path: str | Path, prompts: list[Prompt]) -> None:
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(json.dumps(x.to_json()) + "\n" for x in prompts))
    tmp.replace(p)


def split_heldout(prompts: list[Prompt], n_heldout: int, seed: int = 0) -> tuple[list[Prompt], list[Prompt]]:
    """(train, heldout): ``n_heldout`` prompts round-robin over sources; both keep the input order."""
    rng = random.Random(seed)
    by_source: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_source.setdefault(p.source, []).append(p)
    queues = {s: rng.sample(v, len(v)) for s, v in sorted(by_source.items())}
    held: set[str] = set()
    while len(held) < n_heldout and any(queues.values()):
        for q in queues.values():
            if q and len(held) < n_heldout:
                held.add(q.pop().id)
    return [p for p in prompts if p.id not in held], [p for p in prompts if p.id in held]


def prompt_seed(base_seed: int, prompt_id: str) -> int:
    """The sampling seed of one prompt: stable under reordering and resumption."""
    return (base_seed * 1_000_003 + zlib.crc32(prompt_id.encode())) % 2**31
