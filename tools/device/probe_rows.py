"""Shared plumbing of the session-25 probes: time named call lists in CUDA graphs into a row, and run rows into a
JSON file (GPU, torch and CUDA versions beside them) with each row printed as it lands."""

import json
from collections.abc import Callable, Iterable

import torch

from radiance_bench.kernelbench.timing import graph_time


def time_calls(row: dict, calls: dict[str, list[Callable[[], object]]], **graph) -> dict:
    """``row[name + "_us"]`` / ``row[name + "_median_us"]``: each call list's per-call time (best / median replay)."""
    for name, c in calls.items():
        t = graph_time(c, **graph)
        row[name + "_us"] = t.best_us
        row[name + "_median_us"] = t.median_us
    return row


def write_rows(path: str, rows: Iterable[dict]) -> None:
    """Run ``rows`` (a generator measuring as it goes), printing each, and write them with the run's versions."""
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda, "rows": []}
    for r in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
        out["rows"].append(r)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
