"""End-to-end serving gates: a tiny model served by a real vLLM server on 127.0.0.1 must produce the
same greedy tokens and the same prompt logprobs as an independent transformers forward of the weights.

The server is shared with later gate modules through ``ctx.cached("server:tiny-qwen3", ...)``.
"""

from __future__ import annotations

import httpx
import torch

from gates.core import Row, fmt
from radiance_quant.tiny import build_tiny_qwen3
from radiance_vllm.server import VLLMServer

PROMPTS = [
    "Tom has 3 apples and buys 4 more. How many",
    "def add(a, b):\n    return",
    "The river ran past the old mill and",
    "<|im_start|>user\nWhat is 12 plus 7?<|im_end|>\n<|im_start|>assistant\n",
]
NEW_TOKENS = 32
LOGPROB_BAR = 1e-4  # float32 on both sides; vLLM's CPU kernels differ from torch's only by reassociation


def tiny_qwen3(ctx):
    return ctx.cached("model:tiny-qwen3", lambda: build_tiny_qwen3(ctx.workdir / "tiny-qwen3", seed=0))


def tiny_server(ctx) -> VLLMServer:
    def start():
        server = VLLMServer(tiny_qwen3(ctx), ctx.workdir / "server-tiny", served_name="tiny-qwen3",
                            args=["--max-logprobs", "-1"])
        ctx.on_close(server.stop)
        return server.start()

    return ctx.cached("server:tiny-qwen3", start)


def complete(server: VLLMServer, prompt_ids: list[int], max_tokens: int, prompt_logprobs: int | None = None):
    body = {"model": server.model_name, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0.0,
            "ignore_eos": True, "return_token_ids": True}
    if prompt_logprobs is not None:
        body["prompt_logprobs"] = prompt_logprobs
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()["choices"][0]


class Reference:
    """transformers forward of the checkpoint, float32, no KV cache: an independent implementation."""

    def __init__(self, path):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        return torch.log_softmax(self.model(torch.tensor([ids])).logits[0].double(), -1)

    @torch.no_grad()
    def greedy(self, ids: list[int], n: int) -> list[int]:
        ids = list(ids)
        for _ in range(n):
            ids.append(int(self.model(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[-n:]


def _served_vs_transformers(ctx) -> list[Row]:
    server = tiny_server(ctx)
    ref = ctx.cached("ref:tiny-qwen3", lambda: Reference(tiny_qwen3(ctx)))
    equal = total = 0
    max_dlp = 0.0
    for text in PROMPTS:
        ids = ref.tok(text, add_special_tokens=False)["input_ids"]
        choice = complete(server, ids, NEW_TOKENS, prompt_logprobs=1)
        want = ref.greedy(ids, NEW_TOKENS)
        got = choice["token_ids"]
        equal += sum(a == b for a, b in zip(got, want, strict=True))
        total += NEW_TOKENS
        lp = ref.logprobs(ids)
        for pos, entry in enumerate(choice["prompt_logprobs"][1:], start=1):
            served = entry[str(ids[pos])]["logprob"]
            max_dlp = max(max_dlp, abs(served - float(lp[pos - 1, ids[pos]])))
    return [
        Row("serve: vLLM server healthy (tiny Qwen3, fp32)", f"{server.startup_seconds:.0f} s to healthy",
            "healthy", True),
        Row("serve: greedy tokens == transformers", f"{equal}/{total} equal", "all", equal == total),
        Row("serve: prompt logprobs vs transformers", f"max |Δ| {fmt(max_dlp)}", f"≤ {LOGPROB_BAR:g}",
            max_dlp <= LOGPROB_BAR),
    ]


def gates(ctx):
    yield "serve tiny qwen3", lambda: _served_vs_transformers(ctx)
