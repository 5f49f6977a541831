"""PNG charts of two or more results of one kind (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def labels(results: list[dict]) -> list[str]:
    """Legend labels: the model name, plus the configuration that differs between the results, plus
    the time where that still leaves two alike."""
    cfgs = [r["config"] for r in results]
    names = [Path(str(c.get("model"))).name for c in cfgs]
    if len(set(names)) == len(names):
        return names
    keys = sorted(
        {k for c in cfgs for k, v in c.items() if isinstance(v, str | int | float | type(None))}
        - {"date", "model", "url"}
    )
    differ = [k for k in keys if len({str(c.get(k)) for c in cfgs}) > 1][:3]
    out = [n + "".join(f" {k}={c.get(k)}" for k in differ) for n, c in zip(names, cfgs, strict=True)]
    if len(set(out)) < len(out):
        out = [f"{o} @ {str(c.get('date'))[11:19]}" for o, c in zip(out, cfgs, strict=True)]
    return out


def _bars(ax, groups: list[str], results: list[dict], values: list[list], ylabel: str, title: str) -> None:
    width = 0.8 / len(results)
    x = np.arange(len(groups))
    for i, (label, vals) in enumerate(zip(labels(results), values, strict=True)):
        v = [np.nan if y is None else y for y in vals]
        bars = ax.bar(x + (i - (len(results) - 1) / 2) * width, v, width, label=label)
        ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
    ax.margins(y=0.12)
    ax.set_ylim(bottom=0)
    ax.set_xticks(x, groups, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)


def _lines(
    ax,
    results: list[dict],
    block: str,
    xkey: str,
    ykey: str,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
) -> None:
    xs = set()
    for res, label in zip(results, labels(results), strict=True):
        rows = [r for r in res.get(block) or [] if r.get(ykey) is not None]
        xs |= {r[xkey] for r in rows}
        ax.plot([r[xkey] for r in rows], [r[ykey] for r in rows], marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(xs), [str(x) for x in sorted(xs)])
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)


def plot(results: list[dict], out: Path) -> Path:
    """Draw the kind's figures side by side and save ``out`` (PNG)."""
    kinds = {r["kind"] for r in results}
    if len(kinds) != 1:
        raise ValueError(f"plot needs results of one kind, got {sorted(kinds)}")
    kind = kinds.pop()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    if kind == "mixbench":
        cats = [c["category"] for c in results[0]["categories"]] + ["combined"]
        vals = [[c["decode_tok_s"] for c in r["categories"]] + [r["summary"]["combined_decode_tok_s"]] for r in results]
        _bars(axes[0], cats, results, vals, "decode tok/s (single stream)", "Decode throughput by category")
        _lines(
            axes[1],
            results,
            "sweep",
            "concurrency",
            "aggregate_tok_s",
            "concurrent requests",
            "aggregate output tok/s",
            "Concurrency sweep",
            logx=True,
        )
    elif kind == "decode-ctx":
        _lines(
            axes[0],
            results,
            "rows",
            "context",
            "ms_per_step",
            "context tokens",
            "ms per step",
            "Decode step time vs context",
        )
        _lines(
            axes[1],
            results,
            "rows",
            "context",
            "decode_tok_s",
            "context tokens",
            "decode tok/s",
            "Decode throughput vs context",
        )
    elif kind == "prefill":
        _lines(
            axes[0],
            results,
            "rows",
            "length",
            "prefill_tok_s",
            "prompt tokens",
            "prefill tok/s",
            "Prefill throughput",
            logx=True,
        )
        _lines(
            axes[1],
            results,
            "rows",
            "length",
            "ttft_ms",
            "prompt tokens",
            "TTFT ms",
            "Time to first token",
            logx=True,
        )
    elif kind == "kld":
        keys = [
            ("median_kld", "Median"),
            ("mean_kld", "Mean"),
            ("kld_99", "99.0%"),
            ("kld_99_9", "99.9%"),
            ("max_kld", "Max"),
        ]
        _bars(
            axes[0],
            [k[1] for k in keys],
            results,
            [[r["summary"][k] for k, _ in keys] for r in results],
            "KLD (nats)",
            "KL(ref‖cand) over the reference top-k",
        )
        axes[0].set_yscale("symlog", linthresh=1e-4)
        axes[0].set_ylim(0, 4 * max([r["summary"]["max_kld"] for r in results] + [1e-3]))
        _bars(
            axes[1],
            ["Same top p", "top-k mass left out"],
            results,
            [[100 * r["summary"]["same_top_p"], 100 * r["summary"]["topk_mass_left_out_mean"]] for r in results],
            "%",
            "Top-1 agreement and the mass outside the top-k",
        )
    elif kind == "gsm8k":
        _bars(
            axes[0],
            ["strict", "flexible"],
            results,
            [[100 * r["summary"][f"{k}_acc"] for k in ("strict", "flexible")] for r in results],
            "accuracy %",
            "GSM8K accuracy",
        )
        axes[0].set_ylim(0, 105)
        _bars(
            axes[1],
            ["truncated", "errored"],
            results,
            [[r["summary"]["truncated"], r["summary"]["errored"]] for r in results],
            "requests",
            "Failures",
        )
    elif kind == "greedy-cmp":
        _bars(
            axes[0],
            ["self-consistency"],
            results,
            [[100 * (r["summary"]["self_consistency"] or 0)] for r in results],
            "% prompts",
            "Runs agreeing",
        )
        axes[0].set_ylim(0, 105)
        _bars(axes[1], ["errored"], results, [[r["summary"]["errored"]] for r in results], "requests", "Errors")
    else:
        raise ValueError(f"no plot for result kind {kind!r}")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 3), fontsize=9, frameon=False)
    fig.suptitle(f"radiance-bench {kind}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out
