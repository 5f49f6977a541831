"""Side-by-side comparison of results of one kind, with the paired statistic where one applies.

gsm8k: the sign test on discordant items (paired by question) against the first result.
mixbench: per-prompt single-stream decode tok/s paired by prompt id, Wilcoxon signed-rank test.
greedy-cmp: per prompt, whether the hash sets meet, beside each side's self-consistency.
Others: the summary figures side by side with the ratio to the first result.
"""

from __future__ import annotations

import numpy as np
from rich.table import Table
from scipy import stats as sps

from radiance_bench import greedy_cmp
from radiance_bench.report import f
from radiance_bench.stats import KLD_LABELS, sign_test

#: Row key per kind and the figures compared side by side.
SERIES = {
    "decode-ctx": ("rows", "context", ["ms_per_step", "decode_tok_s"]),
    "prefill": ("rows", "length", ["prefill_tok_s", "ttft_ms"]),
    "mixbench": ("categories", "category", ["decode_tok_s"]),
}


def compare(results: list[dict]) -> dict:
    """A JSON-able comparison of ``results`` (all the same kind; the first is the baseline)."""
    kinds = {r["kind"] for r in results}
    if len(kinds) != 1:
        raise ValueError(f"compare needs results of one kind, got {sorted(kinds)}")
    if len(results) < 2:
        raise ValueError("compare needs at least two results")
    kind = kinds.pop()
    names = [f"{r['config'].get('model')} ({r['config'].get('date')})" for r in results]
    out = {"kind": kind, "results": names, "summary": _summaries(results)}
    base = results[0]
    if kind == "gsm8k":
        out["sign_tests"] = [_gsm8k_pair(base, r) for r in results[1:]]
    elif kind == "mixbench":
        out["paired_prompts"] = [_wilcoxon(base, r) for r in results[1:]]
    elif kind == "greedy-cmp":
        out["cross"] = [greedy_cmp.cross(base, r) for r in results[1:]]
    if kind in SERIES:
        block, key, figs = SERIES[kind]
        out["series"] = {
            fig: {str(row[key]): [_lookup(r, block, key, row[key], fig) for r in results] for row in base[block]}
            for fig in figs
        }
    return out


def _summaries(results):
    keys = [k for k, v in results[0]["summary"].items() if isinstance(v, int | float) and not isinstance(v, bool)]
    return {k: [r["summary"].get(k) for r in results] for k in keys}


def _lookup(res, block, key, value, fig):
    for row in res.get(block) or []:
        if row[key] == value:
            return row.get(fig)
    return None


def _gsm8k_pair(a: dict, b: dict) -> dict:
    bi = {i["id"]: i for i in b["items"]}
    shared = [i for i in a["items"] if i["id"] in bi]
    if not shared:
        raise ValueError("gsm8k results share no questions; nothing to pair")
    out = {"paired": len(shared)}
    for key in ("strict", "flexible"):
        out[key] = sign_test([i[f"{key}_ok"] for i in shared], [bi[i["id"]][f"{key}_ok"] for i in shared])
    return out


def _wilcoxon(a: dict, b: dict) -> dict:
    bp = {p["id"]: p for p in b.get("prompts") or []}
    pairs = [
        (p["decode_tok_s"], bp[p["id"]]["decode_tok_s"])
        for p in a.get("prompts") or []
        if p["id"] in bp and p["decode_tok_s"] and bp[p["id"]]["decode_tok_s"]
    ]
    if len(pairs) < 2:
        return {"paired": len(pairs), "median_ratio": None, "p_value": None}
    x, y = np.array(pairs).T
    diff = y - x
    p = float(sps.wilcoxon(x, y).pvalue) if np.any(diff != 0) else 1.0
    return {
        "paired": len(pairs),
        "median_ratio": float(np.median(y / x)),
        "b_faster": int((diff > 0).sum()),
        "p_value": p,
    }


def tables(cmp: dict) -> list[Table]:
    n = len(cmp["results"])
    heads = (
        ["figure"] + [f"[{i}] " + name for i, name in enumerate(cmp["results"])] + [f"[{i}]/[0]" for i in range(1, n)]
    )
    out = []
    t = Table(title=f"compare {cmp['kind']}")
    for i, h in enumerate(heads):
        t.add_column(h, justify="left" if i == 0 else "right")
    for k, vals in cmp["summary"].items():
        t.add_row(KLD_LABELS.get(k, k), *[f(v) for v in vals], *[_ratio(v, vals[0]) for v in vals[1:]])
    for fig, rows in (cmp.get("series") or {}).items():
        for key, vals in rows.items():
            t.add_row(f"{fig} @ {key}", *[f(v) for v in vals], *[_ratio(v, vals[0]) for v in vals[1:]])
    out.append(t)
    for i, st in enumerate(cmp.get("sign_tests") or [], 1):
        s = Table(title=f"GSM8K paired sign test: [0] vs [{i}] over {st['paired']} questions")
        for h in ("extraction", "[0] only", f"[{i}] only", "discordant", "p (two-sided)"):
            s.add_column(h, justify="right")
        for key in ("strict", "flexible"):
            r = st[key]
            s.add_row(key, str(r["a_only"]), str(r["b_only"]), str(r["discordant"]), f"{r['p_value']:.3g}")
        out.append(s)
    for i, w in enumerate(cmp.get("paired_prompts") or [], 1):
        s = Table(title=f"per-prompt decode tok/s, [0] vs [{i}] (Wilcoxon signed-rank)")
        for h in ("prompts", "median ratio", f"[{i}] faster", "p"):
            s.add_column(h, justify="right")
        s.add_row(str(w["paired"]), f(w["median_ratio"]), f(w.get("b_faster")), f(w["p_value"]))
        out.append(s)
    for i, rows in enumerate(cmp.get("cross") or [], 1):
        s = Table(title=f"greedy hashes, [0] vs [{i}]")
        for h in ("prompt", "[0] runs", f"[{i}] runs", "verdict"):
            s.add_column(h)
        for r in rows:
            verdict = (
                "same"
                if r["same"]
                else (
                    "differs (a side is self-inconsistent: noise)"
                    if not (r["a_consistent"] and r["b_consistent"])
                    else "DIFFERS"
                )
            )
            s.add_row(r["id"], " ".join(map(str, r["a"])), " ".join(map(str, r["b"])), verdict)
        out.append(s)
    return out


def _ratio(v, base) -> str:
    return f"{v / base:.3f}" if isinstance(v, int | float) and isinstance(base, int | float) and base else "–"
