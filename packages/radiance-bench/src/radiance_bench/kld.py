"""Top-k KL divergence of a candidate server against a reference, from prompt logprobs.

Corpora (text files) are cut into fixed ``chunk_chars``-character chunks, the same on both sides. For
each chunk the server returns ``prompt_logprobs``: at every position t ≥ 1 the log-probabilities of
its top-k tokens for token t, plus token t itself. The reference's top-k set S_t is kept; the
candidate's log-probabilities on S_t are looked up, both are renormalised over S_t and
KL(ref‖cand) = Σ_{i∈S_t} P_i log(P_i/Q_i). Tokens of S_t the candidate did not return (its own top-k
is smaller than the vocabulary) take its smallest returned log-probability, an upper bound, so the KL
is then a lower bound; their share is reported as ``cand_missing_frac``. ``-1`` as k asks for the
whole vocabulary (vLLM needs ``--max-logprobs -1``) and makes the KL exact.

A reference can be collected once and saved (``.npz``), so the reference and candidate servers need
not run at the same time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from radiance_bench.client import Client, gather_bounded
from radiance_bench.stats import kld_summary, renormalised_kl


def chunk_corpora(paths: list[Path], chunk_chars: int, max_chunks: int) -> list[dict]:
    """Full ``chunk_chars`` windows from the start of each file, at most ``max_chunks`` per file."""
    chunks = []
    for path in paths:
        text = Path(path).read_text(errors="strict")
        n = min(len(text) // chunk_chars, max_chunks)
        if n == 0:
            raise ValueError(f"{path}: {len(text)} characters, shorter than one {chunk_chars}-char chunk")
        for i in range(n):
            piece = text[i * chunk_chars : (i + 1) * chunk_chars]
            chunks.append(
                {
                    "corpus": Path(path).stem,
                    "index": i,
                    "text": piece,
                    "sha": hashlib.sha256(piece.encode()).hexdigest()[:16],
                }
            )
    return chunks


@dataclass
class ChunkLogprobs:
    """Prompt logprobs of one chunk: ``tokens`` [T]; for positions 1..T-1 the top-k ids/logprobs
    [T-1, k] sorted descending, and ``tok_lp`` [T-1], the logprob of the actual token."""

    tokens: np.ndarray
    ids: np.ndarray
    lp: np.ndarray
    tok_lp: np.ndarray
    lookup: list[dict[int, float]] | None = None


def parse_prompt_logprobs(body: dict, k: int, keep_lookup: bool) -> ChunkLogprobs:
    """A vLLM completion body (``prompt_logprobs`` + ``prompt_token_ids``) → arrays."""
    choice = body["choices"][0]
    tokens = choice.get("prompt_token_ids") or body.get("prompt_token_ids")
    plp = choice.get("prompt_logprobs")
    if tokens is None or plp is None:
        raise ValueError("response lacks prompt_token_ids/prompt_logprobs (is this a vLLM server?)")
    rows = plp[1:]
    width = min(len(d) for d in rows) if k < 0 else k
    ids = np.zeros((len(rows), width), np.int64)
    lp = np.zeros((len(rows), width), np.float64)
    tok_lp = np.zeros(len(rows), np.float64)
    lookup = [] if keep_lookup else None
    for t, d in enumerate(rows):
        entries = sorted(((int(tid), v["logprob"]) for tid, v in d.items()), key=lambda e: -e[1])
        if len(entries) < width:
            raise ValueError(f"position {t + 1}: {len(entries)} logprobs returned, need {width}")
        ids[t], lp[t] = zip(*entries[:width], strict=True)
        table = dict(entries)
        tok_lp[t] = table[int(tokens[t + 1])]
        if keep_lookup:
            lookup.append(table)
    return ChunkLogprobs(np.asarray(tokens, np.int64), ids, lp, tok_lp, lookup)


async def collect(
    client: Client,
    chunks: list[dict],
    k: int,
    concurrency: int,
    label: str,
    keep_lookup: bool = False,
    progress: bool = True,
) -> list[ChunkLogprobs | str]:
    """Prompt logprobs of every chunk; an error kind string where the request failed."""

    async def one(chunk):
        out = await client.post(
            "/v1/completions",
            {
                "model": client.model,
                "prompt": chunk["text"],
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": k,
                "return_token_ids": True,
            },
        )
        if not out.ok:
            return out.error
        try:
            return parse_prompt_logprobs(out.body, k, keep_lookup)
        except (KeyError, ValueError, IndexError, TypeError) as exc:
            return f"bad_response: {exc}"

    return await gather_bounded(chunks, one, concurrency, label, progress)


def save_reference(path: Path, chunks: list[dict], ref: list[ChunkLogprobs], meta: dict) -> Path:
    """Write the reference to ``.npz`` atomically: concatenated arrays + chunk offsets + JSON meta."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok_off = np.cumsum([0] + [len(r.tokens) for r in ref])
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez_compressed(
        tmp,
        tokens=np.concatenate([r.tokens for r in ref]),
        tok_off=tok_off,
        ids=np.concatenate([r.ids for r in ref]),
        lp=np.concatenate([r.lp for r in ref]),
        tok_lp=np.concatenate([r.tok_lp for r in ref]),
        meta=np.array(json.dumps({**meta, "chunks": [{k: c[k] for k in ("corpus", "index", "sha")} for c in chunks]})),
    )
    tmp.replace(path)
    return path


def load_reference(path: Path) -> tuple[dict, list[ChunkLogprobs]]:
    """(meta, per-chunk logprobs) from a saved reference."""
    try:
        z = np.load(path, allow_pickle=False)
        meta = json.loads(str(z["meta"]))
        tok_off = z["tok_off"]
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"{path}: not a radiance-bench kld reference ({exc})") from exc
    out = []
    for i in range(len(tok_off) - 1):
        a, b = int(tok_off[i]), int(tok_off[i + 1])
        pa, pb = a - i, b - i - 1  # one fewer scored position than tokens per chunk
        out.append(ChunkLogprobs(z["tokens"][a:b], z["ids"][pa:pb], z["lp"][pa:pb], z["tok_lp"][pa:pb]))
    return meta, out


def compare_chunk(ref: ChunkLogprobs, cand: ChunkLogprobs) -> dict:
    """Per-position KL, top-1 agreement and actual-token logprobs of one chunk (same tokens required)."""
    if not np.array_equal(ref.tokens, cand.tokens):
        raise ValueError("token_mismatch")
    q = np.empty_like(ref.lp)
    missing = 0
    for t, table in enumerate(cand.lookup):
        floor = min(table.values())
        row = [table.get(int(i)) for i in ref.ids[t]]
        missing += sum(v is None for v in row)
        q[t] = [floor if v is None else v for v in row]
    return {
        "kl": renormalised_kl(ref.lp, q),
        "same_top": ref.ids[:, 0] == cand.ids[:, 0],
        "ref_tok_lp": ref.tok_lp,
        "cand_tok_lp": cand.tok_lp,
        "ref_topk_lp": ref.lp,
        "missing": missing,
        "slots": q.size,
    }


def summarise(parts: list[dict]) -> dict:
    """llama.cpp-named KLD statistics over the concatenated positions of ``parts``."""
    cat = {k: np.concatenate([p[k] for p in parts]) for k in ("kl", "same_top", "ref_tok_lp", "cand_tok_lp")}
    topk = np.concatenate([p["ref_topk_lp"] for p in parts])
    out = kld_summary(cat["kl"], cat["same_top"], cat["ref_tok_lp"], cat["cand_tok_lp"], topk)
    out["cand_missing_frac"] = sum(p["missing"] for p in parts) / max(sum(p["slots"] for p in parts), 1)
    return out


def evaluate(chunks: list[dict], refs: list[ChunkLogprobs], cands: list) -> tuple[dict, dict]:
    """(summary, data) of a candidate against a reference; failed or mismatched chunks are counted."""
    parts, per_chunk, failed = [], [], {}
    for c, r, q in zip(chunks, refs, cands, strict=True):
        try:
            if isinstance(q, str):
                raise ValueError(q)
            part = compare_chunk(r, q)
        except ValueError as exc:
            failed[str(exc)] = failed.get(str(exc), 0) + 1
            continue
        parts.append(part | {"corpus": c["corpus"]})
        per_chunk.append(
            {
                "corpus": c["corpus"],
                "index": c["index"],
                "sha": c["sha"],
                "n_tokens": int(part["kl"].size),
                "mean_kld": float(part["kl"].mean()),
                "same_top_p": float(part["same_top"].mean()),
            }
        )
    if not parts:
        raise RuntimeError(f"no chunk could be compared: {failed}")
    per_corpus = {
        name: summarise([p for p in parts if p["corpus"] == name]) for name in dict.fromkeys(p["corpus"] for p in parts)
    }
    summary = summarise(parts) | {"chunks_compared": len(parts), "chunks_failed": sum(failed.values())}
    return summary, {"per_corpus": per_corpus, "chunks": per_chunk, "chunk_failures": failed}


def reference_summary(ref: list[ChunkLogprobs]) -> dict:
    """What a reference-only run reports: tokens scored, PPL, the top-k mass left out."""
    tok_lp = np.concatenate([r.tok_lp for r in ref])
    left = np.clip(1 - np.exp(np.concatenate([r.lp for r in ref])).sum(-1), 0, 1)
    return {
        "n_chunks": len(ref),
        "n_tokens": int(tok_lp.size),
        "ppl_base": float(np.exp(-tok_lp.mean())),
        "topk_mass_left_out_mean": float(left.mean()),
        "topk_mass_left_out_max": float(left.max()),
    }
