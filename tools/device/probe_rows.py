"""Shared plumbing of the session-25 probes: time named call lists in CUDA graphs into a row, and run rows into a
JSON file (GPU, torch and CUDA versions beside them) with each row printed as it lands."""

import json
from collections.abc import Callable, Iterable

import torch

from radiance_bench.kernelbench import cases
from radiance_bench.kernelbench.timing import copies_needed, graph_time


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


def shape_row(proj, M: int) -> tuple[dict, list, torch.Tensor]:
    """A row for ``proj`` at ``M`` tokens with the peer timed in it (cuBLAS bf16 ``x @ W.T`` over DRAM-fed copies), the
    int4 weight copies that exceed the L2 and the bf16 activations ``x``."""
    N, K = proj.N, proj.K
    n = copies_needed(cases.w4_weight(proj, 4, 0).nbytes)
    wts = [cases.w4_weight(proj, 4, seed=i) for i in range(n)]
    bf = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(copies_needed(2 * N * K))]
    x = cases.activations(M, K, seed=M)
    r = {"proj": proj.name, "M": M, "N": N, "K": K, "weight_copies": n}
    r["cublas_bf16_us"] = graph_time([lambda w=w: x @ w.T for w in bf], reps=10).best_us
    return r, wts, x
