"""Shipped prompt material: filler text for exact-length token prompts, the mixbench categories."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import numpy as np

from radiance_bench.client import Client

DATA = files("radiance_bench") / "data"


def data_path(name: str) -> Path:
    return Path(str(DATA / name))


def default_corpora() -> list[Path]:
    return [data_path("prose.txt"), data_path("code.txt")]


def mixbench_categories(path: Path | None = None) -> dict[str, dict]:
    """{category: {"weight": w, "prompts": [{"id", "content"}]}}; weights are normalised to sum 1."""
    raw = json.loads((Path(path) if path else data_path("mixbench.json")).read_text())["categories"]
    total = sum(c["weight"] for c in raw.values())
    if total <= 0:
        raise ValueError("mixbench: category weights must sum to a positive number")
    return {name: {**c, "weight": c["weight"] / total} for name, c in raw.items()}


class Filler:
    """Token ids of the filler text (tokenised by the server) for prompts of an exact token length.

    ``prompt(n, seed)`` starts at a seed-determined offset into the (cyclically repeated) filler, so a
    given seed always gives the same text; ``unique`` prepends ``unique`` random filler tokens drawn
    from a per-request RNG so no two requests share a prefix-cache block.
    """

    def __init__(self, ids: list[int]):
        if len(ids) < 64:
            raise ValueError(f"filler text tokenises to {len(ids)} tokens; need at least 64")
        self.ids = np.asarray(ids, np.int64)

    @classmethod
    async def load(cls, client: Client, path: Path | None = None) -> Filler:
        text = (Path(path) if path else data_path("prose.txt")).read_text()
        return cls(await client.tokenize(text))

    def prompt(self, n: int, seed: int, unique: int = 0, nonce: int = 0) -> list[int]:
        rng = np.random.default_rng(seed)
        start = int(rng.integers(len(self.ids)))
        head = np.random.default_rng([seed, nonce]).choice(self.ids, size=min(unique, n)) if unique else []
        body = np.take(self.ids, np.arange(start, start + n - len(head)), mode="wrap")
        return [int(t) for t in np.concatenate([head, body])]
