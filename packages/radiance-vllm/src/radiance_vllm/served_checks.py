"""Checks of a served model over HTTP, shared by the tests and the gates.

- :func:`greedy` — a temperature-0 completion as token ids (``return_token_ids``).
- :func:`prompt_logprobs` — the full-vocabulary prompt log-probabilities (server started with
  ``--max-logprobs -1``, request ``prompt_logprobs: -1``), as a dense [T-1, V] tensor.
- :func:`kl_to_reference` — mean over prompt positions of KL(reference ‖ served).
- :func:`reference_greedy` — the same prompt ids continued greedily by a reference torch model.
- :func:`stream_concurrently` — N streaming clients at once; per-prompt text and the error count.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import torch

from radiance_vllm.server import VLLMServer


def greedy(server: VLLMServer, prompt: str, max_tokens: int) -> tuple[list[int], list[int]]:
    """(prompt token ids, completion token ids) of a greedy completion."""
    body = {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "return_token_ids": True, "ignore_eos": True}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    return choice["prompt_token_ids"], choice["token_ids"]


def prompt_logprobs(server: VLLMServer, prompt_ids: list[int], vocab: int) -> torch.Tensor:
    """[T-1, vocab] float64 log p(token | prefix) at prompt positions 1..T-1 (-inf where not returned)."""
    body = {"model": server.model_name, "prompt": prompt_ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": -1}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    rows = r.json()["choices"][0]["prompt_logprobs"][1:]
    out = torch.full((len(rows), vocab), float("-inf"), dtype=torch.float64)
    for t, row in enumerate(rows):
        for tok, entry in row.items():
            out[t, int(tok)] = entry["logprob"]
    return out


@torch.no_grad()
def reference_logprobs(model, prompt_ids: list[int]) -> torch.Tensor:
    logits = model(torch.tensor([prompt_ids])).logits[0, :-1].to(torch.float64)
    return logits.log_softmax(-1)


def kl(ref: torch.Tensor, served: torch.Tensor) -> float:
    """Mean over rows of KL(ref ‖ served), both log-probabilities [T, V]."""
    p = ref.exp()
    terms = torch.where(p > 0, p * (ref - served), torch.zeros_like(p))
    return float(terms.sum(-1).mean())


@torch.no_grad()
def tie_margins(a: list[tuple[list[int], list[int]]], c: list[tuple[list[int], list[int]]],
                c_logprobs: list[torch.Tensor]) -> list[float | None]:
    """Per prompt, where greedy completions ``a`` and ``c`` ((prompt ids, tokens) each) first differ: |log p(c's
    token) − log p(a's token)| under ``c_logprobs`` — c's server scoring a's sequence, whose prefix they share; None
    where they never differ. Two servers that compute the same model in another rounding order part only at such
    near ties."""
    margins = []
    for (ids, a_toks), (_, c_toks), lp in zip(a, c, c_logprobs, strict=True):
        t = next((i for i, (x, y) in enumerate(zip(a_toks, c_toks, strict=True)) if x != y), None)
        row = None if t is None else lp[len(ids) + t - 1]  # row r scores the token at position r + 1
        margins.append(None if row is None else float((row[c_toks[t]] - row[a_toks[t]]).abs()))
    return margins


def reference_greedy(model, prompt_ids: list[int], max_tokens: int) -> list[int]:
    ids = torch.tensor([prompt_ids])
    out = model.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                         attention_mask=torch.ones_like(ids))
    return out[0, len(prompt_ids):].tolist()


async def _stream_one(client: httpx.AsyncClient, server: VLLMServer, prompt: str, max_tokens: int) -> str:
    body = {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}
    text = []
    async with client.stream("POST", f"{server.url}/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            text.append(json.loads(line[6:])["choices"][0]["text"])
    return "".join(text)


def stream_concurrently(server: VLLMServer, prompts: list[str], max_tokens: int) -> tuple[list[str | None], int]:
    """All prompts streamed at once; (texts, number of failed streams)."""

    async def run():
        async with httpx.AsyncClient(timeout=600) as client:
            return await asyncio.gather(*(_stream_one(client, server, p, max_tokens) for p in prompts),
                                        return_exceptions=True)

    results = asyncio.run(run())
    texts = [r if isinstance(r, str) else None for r in results]
    return texts, sum(t is None for t in texts)


def sequential_texts(server: VLLMServer, prompts: list[str], max_tokens: int) -> list[str]:
    texts = []
    for p in prompts:
        body = {"model": server.model_name, "prompt": p, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True}
        r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=300)
        r.raise_for_status()
        texts.append(r.json()["choices"][0]["text"])
    return texts


PROMPTS = [
    "Tom has 3 apples and buys 4 more. How many",
    "def add(a, b):\n    return",
    "The river ran past the old mill and",
    "<|im_start|>user\nWhat is 12 plus 7?<|im_end|>\n<|im_start|>assistant\n",
]


def format_report(server: VLLMServer, model_dir, act: tuple[str, ...] | None, max_tokens: int = 24,
                  dtype: torch.dtype = torch.float32, prompts: tuple[str, ...] = ()) -> dict:
    """Greedy token equality and prompt KL of ``server`` against the simulated reference of ``model_dir``, over
    :data:`PROMPTS` and ``prompts``.

    ``kl_served`` is KL(reference ‖ served); ``kl_act`` is KL(weight-only reference ‖ reference), the
    activation quantization's own effect, which the served error must stay far below; ``prompt_tokens``: each
    prompt's token count.
    """
    from radiance_vllm.sim_reference import load_reference

    ref = load_reference(model_dir, act, dtype)
    weight_only = load_reference(model_dir, None, dtype) if act else ref
    vocab = ref.config.vocab_size
    greedy_equal, first_diff, kls, kl_acts, lengths = [], [], [], [], []
    for prompt in (*PROMPTS, *prompts):
        ids, served_tokens = greedy(server, prompt, max_tokens)
        lengths.append(len(ids))
        ref_tokens = reference_greedy(ref, ids, max_tokens)
        greedy_equal.append(served_tokens == ref_tokens)
        pairs = enumerate(zip(served_tokens, ref_tokens, strict=False))
        first_diff.append(next((i for i, (a, b) in pairs if a != b), None))
        full = ids + served_tokens
        lp_ref = reference_logprobs(ref, full)
        kls.append(kl(lp_ref, prompt_logprobs(server, full, vocab)))
        kl_acts.append(kl(reference_logprobs(weight_only, full), lp_ref))
    return {"greedy_equal": greedy_equal, "first_diff": first_diff, "kl_served": max(kls),
            "kl_act": sum(kl_acts) / len(kl_acts), "prompt_tokens": lengths}
