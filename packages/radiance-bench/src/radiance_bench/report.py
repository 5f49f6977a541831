"""Rich tables for results, one layout per kind, and the side-by-side ``compare`` tables."""

from __future__ import annotations

from rich.table import Table

from radiance_bench.stats import KLD_LABELS


def f(x, digits: int = 4) -> str:
    """A table cell: floats to ``digits`` significant figures, None as '–'."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _table(title: str, headers: list[str], rows: list[list]) -> Table:
    t = Table(title=title)
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[f(x) for x in r])
    return t


def _title(res: dict) -> str:
    c = res["config"]
    return f"{res['kind']} · {c.get('model')} @ {c.get('url')} · {c.get('date')}"


def _client_row(res: dict) -> list:
    cl = res.get("client") or {}
    errs = ", ".join(f"{k} {v}" for k, v in (cl.get("errors") or {}).items()) or "none"
    return ["requests / retries / errors", f"{cl.get('requests', 0)} / {cl.get('retries', 0)} / {errs}"]


def tables(res: dict) -> list[Table]:
    """The tables a command prints for its result."""
    kind, s = res["kind"], res["summary"]
    if kind == "gsm8k":
        rows = [
            [f"{k} match", f"{s[f'{k}_acc']:.2%} ± {s[f'{k}_acc_stderr']:.2%} ({s[f'{k}_correct']}/{s['n']})"]
            for k in ("strict", "flexible")
        ]
        rows += [["truncated", s["truncated"]], ["errored", s["errored"]], _client_row(res)]
        return [_table(_title(res), ["metric", "value"], rows)]
    if kind == "kld":
        rows = [[KLD_LABELS.get(k, k), _kld_cell(k, v)] for k, v in s.items()]
        out = [_table(_title(res), ["statistic", "value"], rows + [_client_row(res)])]
        per = res.get("per_corpus") or {}
        if per:
            keys = ["n_tokens", "mean_kld", "median_kld", "kld_99", "kld_99_9", "max_kld", "same_top_p"]
            out.append(
                _table(
                    "per corpus",
                    ["corpus"] + [KLD_LABELS.get(k, k) for k in keys],
                    [[name] + [_kld_cell(k, v[k]) for k in keys] for name, v in per.items()],
                )
            )
        return out
    if kind == "kld-ref":
        return [_table(_title(res), ["statistic", "value"], [[k, v] for k, v in s.items()] + [_client_row(res)])]
    if kind == "decode-ctx":
        rows = [
            [
                r["context"],
                r["ms_per_step"],
                r["decode_tok_s"],
                r["ttft_ms"],
                (r["spec_decode"] or {}).get("acceptance_per_draft"),
                (r["spec_decode"] or {}).get("tokens_per_update"),
                r["errors"],
            ]
            for r in res["rows"]
        ]
        return [
            _table(
                _title(res),
                ["context", "ms/step", "decode tok/s", "TTFT ms", "acc/draft", "tok/update", "errors"],
                rows,
            )
        ]
    if kind == "prefill":
        rows = [[r["length"], r["prefill_tok_s"], r["ttft_ms"], r["ttft_ms_min"], r["errors"]] for r in res["rows"]]
        return [_table(_title(res), ["prompt tokens", "prefill tok/s", "TTFT ms", "TTFT ms (min)", "errors"], rows)]
    if kind == "mixbench":
        cats = [
            [
                c["category"],
                c["weight"],
                c["decode_tok_s"],
                c["ttft_ms_p50"],
                c["errors"],
            ]
            for c in res["categories"]
        ]
        cats.append(["combined (weighted)", 1.0, s["combined_decode_tok_s"], None, s["single_errors"]])
        out = [_table(_title(res), ["category", "weight", "decode tok/s", "TTFT p50 ms", "errors"], cats)]
        if res.get("sweep"):
            keys = [
                "aggregate_tok_s",
                "ttft_ms_p50",
                "ttft_ms_p90",
                "tpot_ms_p50",
                "tpot_ms_p90",
                "itl_ms_p50",
                "itl_ms_p90",
                "engine_tpot_ms_mean",
                "errors",
            ]
            out.append(
                _table(
                    "concurrency sweep",
                    [
                        "concurrency",
                        "agg tok/s",
                        "TTFT p50",
                        "TTFT p90",
                        "TPOT p50",
                        "TPOT p90",
                        "ITL p50",
                        "ITL p90",
                        "TPOT engine",
                        "errors",
                    ],
                    [[r["concurrency"]] + [r[k] for k in keys] for r in res["sweep"]],
                )
            )
        return out
    if kind == "greedy-cmp":
        rows = [
            [i["id"], " ".join(h or "error" for h in i["hashes"]), "yes" if i["consistent"] else "NO"]
            for i in res["items"]
        ]
        rows.append(["self-consistent", f"{s['self_consistent']}/{s['prompts']}", ""])
        return [_table(_title(res), ["prompt", "hash per run", "consistent"], rows)]
    raise ValueError(f"no table layout for result kind {kind!r}")


def _kld_cell(key: str, v):
    if key in ("same_top_p", "cand_missing_frac") or key.startswith("topk_mass"):
        return f"{v:.3%}" if v is not None else "–"
    return v
