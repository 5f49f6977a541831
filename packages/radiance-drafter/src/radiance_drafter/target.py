"""The target model in-process (transformers): prompt tokens, answers, and tapped hidden states.

Taps are forward hooks on the target's decoder layers: layer ``i``'s output (the residual stream, before
the final norm) is what vLLM hands the drafter for ``target_layer_ids`` entry ``i``. The final-norm output
is kept too: ``lm_head(final)`` are the target's logits, which the offline proxy needs.
Answers come from the target itself (``generate``) or from a served target (:class:`ServedGenerator`,
OpenAI completions with token-id prompts and ``return_token_ids``), at the given sampling settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import torch

from radiance_drafter.prompts import Prompt


@dataclass(frozen=True)
class Sampling:
    """Served sampling settings; the per-prompt seed is derived from ``seed`` and the prompt id."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    seed: int = 0

    def asdict(self) -> dict:
        return asdict(self)


def prompt_ids(tokenizer, p: Prompt) -> list[int]:
    """Token ids of a prompt: the chat template with the generation prompt, or the raw text."""
    if p.messages is not None:
        ids = tokenizer.apply_chat_template(list(p.messages), add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return tokenizer.encode(p.prompt, add_special_tokens=False)


class TargetRunner:
    """A transformers causal LM with hooks on the tapped layers and on the final norm."""

    def __init__(self, target_dir: str | Path, layer_ids: tuple[int, ...], device: str = "cpu",
                 dtype: torch.dtype = torch.float32):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
        self.model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=dtype).to(device).eval()
        self.device = device
        self.layer_ids = tuple(layer_ids)
        decoder = self.model.get_decoder()
        n = len(decoder.layers)
        if any(not 0 <= i < n for i in self.layer_ids):
            raise ValueError(f"target_layer_ids {self.layer_ids} outside the target's {n} layers")
        self._taps: dict[int, torch.Tensor] = {}
        for i in self.layer_ids:
            decoder.layers[i].register_forward_hook(self._keep(i))
        decoder.norm.register_forward_hook(self._keep("final"))

    def _keep(self, key):
        def hook(_module, _inputs, output):
            self._taps[key] = output[0] if isinstance(output, tuple) else output
        return hook

    @torch.no_grad()
    def generate(self, ids: list[int], sampling: Sampling, seed: int) -> list[int]:
        """The target's own answer (in-process), ending at EOS or ``max_tokens``."""
        torch.manual_seed(seed)
        x = torch.tensor([ids], device=self.device)
        kw = {"do_sample": sampling.temperature > 0, "max_new_tokens": sampling.max_tokens,
              "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id}
        if sampling.temperature > 0:
            kw.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        out = self.model.generate(x, attention_mask=torch.ones_like(x), **kw)
        return out[0, len(ids):].tolist()

    @torch.no_grad()
    def hidden(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(taps [T, L, H] float32, final-norm output [T, H] float32) for one sequence."""
        self._taps.clear()
        self.model.model(input_ids=torch.tensor([ids], device=self.device))
        taps = torch.stack([self._taps[i][0] for i in self.layer_ids], dim=1).float().cpu()
        return taps, self._taps["final"][0].float().cpu()


class ServedGenerator:
    """Answers from an OpenAI-compatible vLLM server, as token ids."""

    def __init__(self, url: str, model: str, timeout: float = 600.0):
        self.url, self.model = url.rstrip("/"), model
        self.client = httpx.Client(timeout=timeout)

    def generate(self, ids: list[int], sampling: Sampling, seed: int) -> list[int]:
        body = {"model": self.model, "prompt": ids, "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": seed,
                "return_token_ids": True}
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        r = self.client.post(f"{self.url}/v1/completions", json=body)
        r.raise_for_status()
        choice = r.json()["choices"][0]
        if choice.get("token_ids") is None:
            raise RuntimeError(f"{self.url} returned no token_ids (server does not support return_token_ids)")
        return list(choice["token_ids"])
