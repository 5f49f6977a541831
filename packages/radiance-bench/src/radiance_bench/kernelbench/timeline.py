"""Where a CUDA-graph step spends its time: each launch's first-program start and last-program end from the
profiler's kernel records (CUPTI), each launch named by the role it plays in the step.

A role is one op of the step (``Role``: a name, the kernel-name fragments of its launches, the weight bytes it
streams; the same name in every layer sums over them). Consecutive launches matching a role's fragments are its
launches; the next role begins at the first launch that matches it and not the current one. Per (role, kernel): the
**exposed** time — the launch's end minus the latest end before it, so the exposed times of a step add up to the
step —, the idle **gap** before its start (launch latency no programmatic dependent hid) and the **duration** (a
programmatic dependent starts before the launch ahead of it ends: its duration includes its wait). A launch that
belongs to no role (a fill the step issues) is ``other``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Role:
    name: str
    fragments: tuple[str, ...]  # a launch is this role's when its kernel name holds one of them
    weight_bytes: int = 0  # what the role streams (GEMMs), for its weight-stream limit
    layer: int | None = None  # the model layer it belongs to (for the plot's launch timeline)

    def matches(self, kernel: str) -> bool:
        return any(f in kernel for f in self.fragments)


def kernels_of(trace_events: Sequence[dict]) -> list[dict]:
    """The kernel records of a Chrome trace (``cat == "kernel"``) in start order: name, start, end (µs from the
    first start)."""
    ks = sorted((e for e in trace_events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    if not ks:
        raise RuntimeError("the trace holds no kernel records (was CUDA activity traced?)")
    t0 = ks[0]["ts"]
    return [dict(name=e["name"], start=e["ts"] - t0, end=e["ts"] + e["dur"] - t0) for e in ks]


def traced_kernels(run: Callable[[], object], warmup: int = 2) -> list[dict]:
    """``run`` captured in one CUDA graph and replayed once under the profiler: its launches (:func:`kernels_of`)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):  # compile, allocate, autotune outside the capture
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    del graph
    return kernels_of(events)


def attribute(kernels: list[dict], roles: Sequence[Role], read_TBps: float) -> list[dict]:
    """Per (role, kernel) of ``kernels`` walked against ``roles`` in order: launches, exposed / gap / duration µs
    summed over the step, and for roles that stream weights their weight-stream limit at ``read_TBps``. Each kernel
    dict gains its ``role`` and ``layer``. Raises if the launches do not cover every role in order."""
    rows: dict[tuple[str, str], dict] = {}
    limits: dict[str, float] = {}
    for r in roles:
        if r.weight_bytes:
            limits[r.name] = limits.get(r.name, 0.0) + r.weight_bytes / (read_TBps * 1e12) * 1e6
    i, seen, prev_end = 0, False, 0.0  # the current role, whether it has a launch yet
    for k in kernels:
        nxt = roles[i + 1] if i + 1 < len(roles) else None
        if seen and nxt is not None and nxt.matches(k["name"]) and not roles[i].matches(k["name"]):
            i, seen = i + 1, False
        if i < len(roles) and roles[i].matches(k["name"]):
            role, seen, k["layer"] = roles[i].name, True, roles[i].layer
        else:
            role, k["layer"] = "other", None
        row = rows.setdefault((role, k["name"]), dict(role=role, kernel=k["name"], launches=0, exposed_us=0.0,
                                                      gap_us=0.0, duration_us=0.0))
        row["launches"] += 1
        row["exposed_us"] += k["end"] - prev_end
        row["gap_us"] += max(0.0, k["start"] - prev_end)
        row["duration_us"] += k["end"] - k["start"]
        prev_end = max(prev_end, k["end"])
        k["role"] = role
    if i != len(roles) - 1 or not seen:
        raise RuntimeError(f"the launches cover {i + seen} of the step's {len(roles)} roles in order; first "
                           f"kernels: {[k['name'] for k in kernels[:12]]}")
    for row in rows.values():  # a role's limit on its first row only, so that the rows' limits add up
        if row["role"] in limits:
            row["limit_us"] = limits.pop(row["role"])
    return list(rows.values())


def table(rows: list[dict]) -> str:
    """A readable table of :func:`attribute`'s rows, then their sums per kernel (role "all"), the step last."""
    lines = [f"{'role':18s} {'kernel':26s} {'n':>4s} {'exposed us':>11s} {'gap us':>8s} {'duration us':>12s} "
             f"{'limit us':>9s} {'exp/limit':>9s}"]
    for r in rows:
        lim = r.get("limit_us")
        lines.append(f"{r['role']:18s} {r['kernel'][:26]:26s} {r['launches']:4d} {r['exposed_us']:11.1f} "
                     f"{r['gap_us']:8.1f} {r['duration_us']:12.1f} {lim or 0.0:9.1f} "
                     f"{r['exposed_us'] / lim if lim else float('nan'):9.2f}")
    by_kernel: dict[str, list[float]] = {}
    for r in rows:
        k = by_kernel.setdefault(r["kernel"], [0, 0.0, 0.0])
        k[0] += r["launches"]
        k[1] += r["exposed_us"]
        k[2] += r.get("limit_us", 0.0)
    for name, (n, exposed, lim) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{'all':18s} {name[:26]:26s} {n:4d} {exposed:11.1f} {'':8s} {'':12s} {lim:9.1f} "
                     f"{exposed / lim if lim else float('nan'):9.2f}")
    total = sum(r["exposed_us"] for r in rows)
    lines.append(f"{'step':18s} {'':26s} {sum(r['launches'] for r in rows):4d} {total:11.1f}")
    return "\n".join(lines)


def plot(out: str, run: dict, layers: tuple[int, ...] = (2, 3)) -> None:
    """Left: one bar per (role, kernel) of a profiled step (:func:`attribute`'s rows in ``run["roles"]``), its exposed
    time with the weight-stream limit of what it streams beside it. Right: the launches of ``layers`` (by default a GDN
    and an attention layer of the chained stack) on a time line, each from its first program's start to its last
    program's end — a programmatic dependent's bar starts under the launch before it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = run["roles"]
    short = lambda kernel: kernel.strip("_").split("_kernel")[0]  # noqa: E731
    names = [f"{r['role']} · {short(r['kernel'])}" for r in rows]
    span = [k for k in run.get("launches", []) if k.get("layer") in layers]
    fig, (ax, tl_ax) = plt.subplots(1, 2, figsize=(17, 0.35 * max(len(rows), len(span)) + 2),
                                    gridspec_kw={"width_ratios": [1, 1.2]})
    y = range(len(rows))
    ax.barh(y, [r["exposed_us"] for r in rows], color="tab:blue", label="exposed (µs per step)")
    ax.barh(y, [r.get("limit_us", 0.0) for r in rows], height=0.35, color="tab:orange",
            label="weight-stream limit")
    ax.set_yticks(list(y), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("µs per decode step")
    ax.set_title(f"{run['label']}: step {run['step_us']:.0f} µs traced, limit {run['limit_us']:.0f} µs", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    if span:
        t0 = span[0]["start"]
        colors = {}
        for j, k in enumerate(span):
            c = colors.setdefault(k["role"], f"C{len(colors) % 10}")
            tl_ax.barh(j, k["end"] - k["start"], left=k["start"] - t0, color=c)
        tl_ax.set_yticks(range(len(span)), [f"L{k['layer']} {k['role']} · {short(k['name'])}" for k in span],
                         fontsize=8)
        tl_ax.invert_yaxis()
        tl_ax.set_xlabel("µs from the first launch shown")
        tl_ax.set_title(f"launches of layers {', '.join(map(str, layers))}", fontsize=10)
    else:
        tl_ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> None:
    """``python -m radiance_bench.kernelbench.timeline OUT_PREFIX kb-stack_profile.json``: the table of each
    profiled step and a plot per step (``OUT_PREFIX-<label>.png``)."""
    prefix, path = argv
    with open(path) as f:
        runs = [r for r in json.load(f)["results"] if r.get("section") == "stack_profile" and "roles" in r]
    for run in runs:
        print(f"{run['label']}: step {run['step_us']:.1f} us traced, {run['untraced_us']:.1f} untraced, "
              f"weight-stream limit {run['limit_us']:.1f} us")
        print(table(run["roles"]))
        plot(f"{prefix}-{run['label'].replace(' ', '-')}.png", run)


if __name__ == "__main__":
    main(sys.argv[1:])
