"""``radiance-bench``: serving benchmarks against any OpenAI-compatible server (JSON + tables + plots)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

import typer

from radiance_bench import compare as compare_mod
from radiance_bench import greedy_cmp, gsm8k, kld, mixbench, perf, report, results
from radiance_bench import plot as plot_mod
from radiance_bench.client import Client
from radiance_bench.console import console, err_console
from radiance_bench.prompts import Filler, default_corpora, mixbench_categories

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False)

Url = Annotated[str, typer.Option(help="server base URL (OpenAI-compatible)")]
Model = Annotated[str | None, typer.Option(help="served model id (default: the server's first model)")]
Out = Annotated[Path | None, typer.Option(help="result JSON (default results/<kind>-<model>-<time>.json)")]
Timeout = Annotated[float, typer.Option(help="seconds per request attempt")]
Retries = Annotated[int, typer.Option(help="retries per request (transport errors, timeouts, 429, 5xx)")]
Deadline = Annotated[float | None, typer.Option(help="seconds for the whole run; later requests fail")]
Seed = Annotated[int, typer.Option(help="request seed (fixes sampled text and prompt offsets)")]
Temperature = Annotated[float, typer.Option(help="sampling temperature")]
Progress = Annotated[bool, typer.Option(help="progress bars on stderr")]
URL_DEFAULT = "http://127.0.0.1:8000"


def _execute(
    kind: str,
    url: str,
    model: str | None,
    out: Path | None,
    timeout: float,
    retries: int,
    deadline: float | None,
    config: dict,
    work: Callable[[Client], Awaitable[tuple[dict, dict]]],
) -> dict:
    """Resolve the model, run ``work``, write the result atomically, print its tables."""

    async def main() -> dict:
        async with Client(url, model, timeout=timeout, retries=retries, deadline=deadline) as client:
            await client.resolve_model()
            server = await client.server_info()
            summary, data = await work(client)
            cfg = {
                "url": url,
                "model": client.model,
                "server": server,
                "timeout_s": timeout,
                "retries": retries,
                "deadline_s": deadline,
                **config,
            }
            return results.envelope(kind, cfg, summary, client.stats(), **data)

    try:
        res = asyncio.run(main())
    except (RuntimeError, ValueError) as exc:
        err_console.print(f"[red]{kind}: {exc}[/red]")
        raise typer.Exit(2) from exc
    path = results.write_json(res, out or results.default_path(kind, res["config"]["model"]))
    for t in report.tables(res):
        console.print(t)
    failed = sum((res["client"].get("errors") or {}).values())
    err_console.print(f"wrote {path}" + (f" ([red]{failed} requests failed[/red])" if failed else ""))
    if failed:
        raise typer.Exit(3)
    return res


@app.command("gsm8k")
def gsm8k_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    data: Annotated[Path | None, typer.Option(help="GSM8K-layout JSONL (default: built-in set)")] = None,
    limit: Annotated[int | None, typer.Option(help="first N questions only")] = None,
    mode: Annotated[str, typer.Option(help="'completion' (n-shot text) or 'chat' (chat template)")] = "chat",
    n_shot: Annotated[int | None, typer.Option(help="exemplars (default 5 completion, 0 chat)")] = None,
    fewshot: Annotated[Path | None, typer.Option(help="exemplar pool JSONL (default built-in)")] = None,
    max_tokens: int = 256,
    temperature: Temperature = 0.0,
    seed: Seed = 0,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 8,
    timeout: Timeout = 300.0,
    retries: Retries = 2,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """GSM8K accuracy: strict (#### N) and flexible (last number) extraction, truncated/errored counts."""
    items = gsm8k.load_items(data, limit)
    pool = gsm8k.load_items(fewshot)
    n_shot = (5 if mode == "completion" else 0) if n_shot is None else n_shot
    cfg = {
        "data": str(data) if data else "built-in",
        "n_items": len(items),
        "mode": mode,
        "n_shot": n_shot,
        "fewshot": str(fewshot) if fewshot else "built-in",
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "concurrency": concurrency,
    }

    async def work(client):
        recs = await gsm8k.run(client, items, pool, n_shot, mode, max_tokens, temperature, seed, concurrency, progress)
        return gsm8k.summarise(recs), {"items": recs}

    _execute("gsm8k", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("kld")
def kld_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    corpus: Annotated[list[Path] | None, typer.Option(help="text file (repeatable; default: shipped)")] = None,
    chunk_chars: Annotated[int, typer.Option(help="characters per chunk, identical on both sides")] = 1500,
    max_chunks: Annotated[int, typer.Option(help="chunks per corpus")] = 32,
    top_k: Annotated[int, typer.Option(help="reference top-k (-1: whole vocabulary)")] = 20,
    cand_top_k: Annotated[int | None, typer.Option(help="candidate top-k (default: --top-k)")] = None,
    ref_url: Annotated[str | None, typer.Option(help="live reference server")] = None,
    ref_model: Annotated[str | None, typer.Option(help="reference model id")] = None,
    ref: Annotated[Path | None, typer.Option(help="saved reference (.npz) instead of --ref-url")] = None,
    save_ref: Annotated[
        Path | None,
        typer.Option(help="save the reference (.npz); with no --ref-url/--ref, --url is the reference"),
    ] = None,
    concurrency: int = 2,
    timeout: Timeout = 600.0,
    retries: Retries = 2,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """KL(ref‖cand) over the reference's top-k from prompt logprobs; llama.cpp's statistic names."""
    if ref and ref_url:
        raise typer.BadParameter("give --ref or --ref-url, not both")
    corpora = corpus or default_corpora()
    chunks = kld.chunk_corpora(corpora, chunk_chars, max_chunks)
    cand_k = top_k if cand_top_k is None else cand_top_k
    ref_only = ref is None and ref_url is None
    if ref_only and save_ref is None:
        raise typer.BadParameter("give a reference: --ref-url, --ref, or --save-ref to collect one from --url")
    cfg = {
        "corpora": [str(p) for p in corpora],
        "chunk_chars": chunk_chars,
        "max_chunks": max_chunks,
        "n_chunks": len(chunks),
        "top_k": top_k,
        "cand_top_k": cand_k,
        "ref_url": ref_url,
        "ref_model": ref_model,
        "ref_file": str(ref) if ref else None,
        "concurrency": concurrency,
        "temperature": 0.0,
        "seed": None,
    }

    async def reference(client) -> list:
        if ref is not None:
            meta, data = kld.load_reference(ref)
            if [c["sha"] for c in meta["chunks"]] != [c["sha"] for c in chunks]:
                raise ValueError(f"{ref}: saved for other chunks (corpora/--chunk-chars/--max-chunks differ)")
            if meta["top_k"] != top_k:
                raise ValueError(f"{ref}: saved with top-k {meta['top_k']}, asked for {top_k}")
            cfg["ref_model"] = meta.get("model")
            return data
        src = client if ref_only else Client(ref_url, ref_model, timeout=client.timeout, retries=client.retries)
        try:
            await src.resolve_model()
            cfg["ref_model"] = src.model
            got = await kld.collect(src, chunks, top_k, concurrency, "kld reference", progress=progress)
        finally:
            if src is not client:
                await src.http.aclose()
        bad = [g for g in got if isinstance(g, str)]
        if bad:
            raise RuntimeError(f"reference: {len(bad)} of {len(got)} chunks failed ({bad[0]})")
        if save_ref:
            kld.save_reference(
                save_ref,
                chunks,
                got,
                {"model": src.model, "url": src.url, "top_k": top_k, "chunk_chars": chunk_chars},
            )
        return got

    async def work(client):
        refs = await reference(client)
        if ref_only:
            return kld.reference_summary(refs), {"saved_reference": str(save_ref)}
        cands = await kld.collect(
            client, chunks, cand_k, concurrency, "kld candidate", keep_lookup=True, progress=progress
        )
        return kld.evaluate(chunks, refs, cands)

    _execute("kld-ref" if ref_only else "kld", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("decode-ctx")
def decode_ctx_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    contexts: Annotated[str, typer.Option(help="context tokens, comma list; 'max' = the limit")] = "25,8192,32768",
    max_tokens: Annotated[int, typer.Option(help="tokens decoded per request")] = 256,
    temperature: Temperature = 0.0,
    seed: Seed = 0,
    repeats: int = 1,
    ignore_eos: bool = True,
    filler: Annotated[Path | None, typer.Option(help="context text (default: shipped prose)")] = None,
    timeout: Timeout = 600.0,
    retries: Retries = 1,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """Single-stream decode at context lengths: ms/step, tok/s, spec-decode acceptance from /metrics."""
    cfg = {
        "contexts": contexts,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "repeats": repeats,
        "ignore_eos": ignore_eos,
        "concurrency": 1,
        "filler": str(filler or "shipped"),
    }

    async def work(client):
        limit = (await client.server_info()).get("max_model_len")
        lengths, skipped = perf.parse_lengths(contexts, limit, max_tokens)
        fill = await Filler.load(client, filler)
        rows = await perf.decode_ctx(
            client, fill, lengths, max_tokens, temperature, seed, repeats, ignore_eos, progress
        )
        first = next((r for r in rows if r["ms_per_step"] is not None), {})
        return (
            {
                "ms_per_step_first": first.get("ms_per_step"),
                "decode_tok_s_first": first.get("decode_tok_s"),
                "contexts_run": len(rows),
                "contexts_skipped": skipped,
            },
            {"rows": rows},
        )

    _execute("decode-ctx", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("prefill")
def prefill_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    lengths: Annotated[
        str, typer.Option(help="prompt tokens, comma list; 'max' = the limit")
    ] = "2048,8192,16384,32768,65536",
    repeats: int = 3,
    seed: Seed = 0,
    filler: Annotated[Path | None, typer.Option(help="prompt text (default: shipped prose)")] = None,
    timeout: Timeout = 600.0,
    retries: Retries = 1,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """Prompt processing tok/s and TTFT over a length sweep, prefix caching defeated (unique prefixes)."""
    cfg = {
        "lengths": lengths,
        "repeats": repeats,
        "seed": seed,
        "temperature": 0.0,
        "concurrency": 1,
        "unique_prefix_tokens": perf.UNIQUE_PREFIX,
        "filler": str(filler or "shipped"),
    }

    async def work(client):
        limit = (await client.server_info()).get("max_model_len")
        keep, skipped = perf.parse_lengths(lengths, limit, 1)
        fill = await Filler.load(client, filler)
        rows = await perf.prefill(client, fill, keep, repeats, seed, progress=progress)
        best = max((r["prefill_tok_s"] for r in rows if r["prefill_tok_s"]), default=None)
        return {"prefill_tok_s_max": best, "lengths_run": len(rows), "lengths_skipped": skipped}, {"rows": rows}

    _execute("prefill", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("mixbench")
def mixbench_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    prompts: Annotated[Path | None, typer.Option(help="categories JSON (default: shipped)")] = None,
    max_tokens: int = 256,
    temperature: Temperature = 0.0,
    seed: Seed = 0,
    sweep: Annotated[bool, typer.Option(help="run the concurrency sweep")] = True,
    levels: Annotated[str, typer.Option(help="concurrency levels")] = "1,2,4,8,16",
    requests: Annotated[int, typer.Option(help="requests per level (at least 2x the level)")] = 16,
    timeout: Timeout = 300.0,
    retries: Retries = 1,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """Eight categories single-stream (weighted combined decode tok/s) + concurrency sweep."""
    cats = mixbench_categories(prompts)
    lv = [int(x) for x in levels.split(",") if x.strip()] if sweep else []
    cfg = {
        "prompts": str(prompts or "shipped"),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "concurrency": lv,
        "requests_per_level": requests,
        "weights": {c: v["weight"] for c, v in cats.items()},
    }

    async def work(client):
        rows, per_cat, combined = await mixbench.single_stream(client, cats, max_tokens, temperature, seed, progress)
        sw = await mixbench.sweep(client, cats, lv, requests, max_tokens, temperature, seed, progress)
        summary = {
            "combined_decode_tok_s": combined,
            "single_errors": sum(r["error"] is not None for r in rows),
        }
        summary |= {f"aggregate_tok_s_c{r['concurrency']}": r["aggregate_tok_s"] for r in sw}
        return summary, {"prompts": rows, "categories": per_cat, "sweep": sw}

    _execute("mixbench", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("greedy-cmp")
def greedy_cmp_cmd(
    url: Url = URL_DEFAULT,
    model: Model = None,
    out: Out = None,
    runs: Annotated[int, typer.Option(min=2, help="passes (>= 2: the self-consistency control)")] = 2,
    n_prompts: Annotated[int, typer.Option(help="first N mixbench prompts")] = 8,
    max_tokens: int = 128,
    seed: Seed = 7,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 1,
    timeout: Timeout = 300.0,
    retries: Retries = 1,
    deadline: Deadline = None,
    progress: Progress = True,
):
    """Hashes of greedy completions across runs; compare two results to tell a change from noise."""
    prompts = mixbench.flat_prompts(mixbench_categories())[:n_prompts]
    cfg = {
        "runs": runs,
        "n_prompts": len(prompts),
        "max_tokens": max_tokens,
        "seed": seed,
        "temperature": 0.0,
        "concurrency": concurrency,
    }

    async def work(client):
        items = await greedy_cmp.run(client, prompts, runs, max_tokens, seed, concurrency, progress)
        return greedy_cmp.summarise(items, runs), {"items": items}

    _execute("greedy-cmp", url, model, out, timeout, retries, deadline, cfg, work)


@app.command("compare")
def compare_cmd(
    paths: Annotated[list[Path], typer.Argument(help="result JSONs of one kind; the first is [0]")],
    out: Annotated[Path | None, typer.Option(help="write the comparison JSON here")] = None,
):
    """Results side by side; paired tests: GSM8K sign test, mixbench per-prompt Wilcoxon, greedy hashes."""
    try:
        cmp = compare_mod.compare([results.load(p) for p in paths])
    except ValueError as exc:
        err_console.print(f"[red]compare: {exc}[/red]")
        raise typer.Exit(2) from exc
    for t in compare_mod.tables(cmp):
        console.print(t)
    if out:
        results.write_json(cmp | {"inputs": [str(p) for p in paths], "date": results.now_utc()}, out)
        err_console.print(f"wrote {out}")


@app.command("plot")
def plot_cmd(
    paths: Annotated[list[Path], typer.Argument(help="result JSONs of one kind")],
    out: Annotated[Path, typer.Option(help="PNG path")] = Path("results/plot.png"),
):
    """PNG chart of two or more results of one kind."""
    try:
        path = plot_mod.plot([results.load(p) for p in paths], out)
    except ValueError as exc:
        err_console.print(f"[red]plot: {exc}[/red]")
        raise typer.Exit(2) from exc
    err_console.print(f"wrote {path}")
