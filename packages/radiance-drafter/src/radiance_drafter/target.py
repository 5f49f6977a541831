"""The target model in-process (transformers): prompt tokens, answers, and tapped hidden states.

Taps are forward hooks on the target's decoder layers: layer ``i``'s output (the residual stream, before
the final norm) is what vLLM hands the drafter for ``target_layer_ids`` entry ``i``. The final-norm output
is kept too: ``lm_head(final)`` are the target's logits, which the offline proxy needs.
Answers come from the target itself (``generate``) or from a served target (:class:`ServedGenerator`,
OpenAI completions with token-id prompts and ``return_token_ids``), at the given sampling settings.

:class:`ServedTarget` takes the same taps from the served engine instead (a target only vLLM can run, e.g. a
radiance-quantized checkpoint): a *capture server* runs vLLM's ``extract_hidden_states`` speculative method
(:func:`capture_server_args`), which hands the residual stream at vLLM aux layer ``j`` (the input of decoder
layer ``j`` = the output of layer ``j - 1``; ``j = n_layers`` is the last layer's output before the final
norm) to a KV connector (:mod:`radiance_drafter.vllm_connector`) that writes it to a file per request. Tap
``i`` is aux layer ``i + 1``, exactly what vLLM's dflash proposer feeds the drafter for ``target_layer_ids``
entry ``i``; the final-norm output is the target's final RMSNorm applied to aux layer ``n_layers``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import torch

from radiance_drafter.model import read_target_tensors
from radiance_drafter.prompts import Prompt

# Final RMSNorm of the served target, by text model_type: y = x / rms(x) * (offset + weight)
NORM_OFFSET = {"qwen2": 0.0, "qwen3": 0.0, "qwen3_moe": 0.0, "llama": 0.0,
               "qwen3_next": 1.0, "qwen3_5_text": 1.0, "qwen3_5_moe_text": 1.0}


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
        return self._token_ids(self._post(self._body(ids, sampling, seed)))

    def _body(self, ids: list[int], sampling: Sampling, seed: int) -> dict:
        body = {"model": self.model, "prompt": ids, "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": seed,
                "return_token_ids": True}
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        return body

    def _post(self, body: dict) -> dict:
        r = self.client.post(f"{self.url}/v1/completions", json=body)
        r.raise_for_status()
        return r.json()

    def _token_ids(self, out: dict) -> list[int]:
        choice = out["choices"][0]
        if choice.get("token_ids") is None:
            raise RuntimeError(f"{self.url} returned no token_ids (server does not support return_token_ids)")
        return list(choice["token_ids"])


def _text_config(target_dir: str | Path) -> dict:
    cfg = json.loads((Path(target_dir) / "config.json").read_text())
    return cfg.get("text_config", cfg)


def capture_aux_layers(layer_ids: tuple[int, ...], n_layers: int) -> tuple[int, ...]:
    """The vLLM aux layers a capture server extracts, sorted as vLLM stores them: ``i + 1`` per tap, and
    ``n_layers`` (the last layer's output, for the final norm)."""
    if any(not 0 <= i < n_layers for i in layer_ids):
        raise ValueError(f"target_layer_ids {tuple(layer_ids)} outside the target's {n_layers} layers")
    return tuple(sorted({i + 1 for i in layer_ids} | {n_layers}))


def capture_server_args(target_dir: str | Path, layer_ids: tuple[int, ...], storage_dir: str | Path) -> list[str]:
    """vLLM server arguments that make a served target a capture server for ``layer_ids``: the
    ``extract_hidden_states`` method (one dummy draft token that the target verifies: greedy answers are the
    target's own, sampled ones are not reproducible under a seed),
    :class:`~radiance_drafter.vllm_connector.HostHiddenStatesConnector` writing into ``storage_dir`` (on
    the capture client's filesystem), and no prefix caching, so each sequence's hidden states come from
    one prefill of the whole sequence."""
    aux = capture_aux_layers(tuple(layer_ids), _text_config(target_dir)["num_hidden_layers"])
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(aux)}}}
    kv = {"kv_connector": "HostHiddenStatesConnector", "kv_connector_module_path": "radiance_drafter.vllm_connector",
          "kv_role": "kv_producer", "kv_connector_extra_config": {"shared_storage_path": str(storage_dir)}}
    compact = {"separators": (",", ":")}
    return ["--speculative-config", json.dumps(spec, **compact), "--kv-transfer-config", json.dumps(kv, **compact),
            "--no-enable-prefix-caching"]


class ServedTarget(ServedGenerator):
    """Answers and tapped hidden states from a capture server (:func:`capture_server_args`).

    ``hidden(seq)`` sends ``seq`` as a prompt with ``max_tokens`` 1; the connector's file for that request
    holds the aux layers for every token of ``seq`` (read with vLLM's ``load_hidden_states``, which waits on
    the file's lock, then deleted). Every answer request writes a file too; ``generate`` deletes it.
    """

    def __init__(self, url: str, model: str, target_dir: str | Path, layer_ids: tuple[int, ...],
                 timeout: float = 600.0):
        from transformers import AutoTokenizer

        super().__init__(url, model, timeout)
        self.tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
        cfg = _text_config(target_dir)
        n = cfg["num_hidden_layers"]
        self.layer_ids = tuple(layer_ids)
        self.aux = capture_aux_layers(self.layer_ids, n)
        self.tap_rows = [self.aux.index(i + 1) for i in self.layer_ids]
        self.last_row = self.aux.index(n)
        if cfg.get("model_type") not in NORM_OFFSET:
            raise ValueError(f"served capture: final norm of model_type {cfg.get('model_type')!r} is not known "
                             f"(known: {sorted(NORM_OFFSET)})")
        found = read_target_tensors(target_dir, {"norm": lambda k: k in ("model.norm.weight",
                                                                           "model.language_model.norm.weight")})
        if "norm" not in found:
            raise ValueError(f"{target_dir}: no model.norm.weight (the final norm) in the checkpoint")
        self.norm_weight = found["norm"].float() + NORM_OFFSET[cfg["model_type"]]
        self.eps = cfg["rms_norm_eps"]

    def _fetch(self, out: dict) -> dict[str, torch.Tensor]:
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
            cleanup_hidden_states,
            load_hidden_states,
        )

        path = (out.get("kv_transfer_params") or {}).get("hidden_states_path")
        if path is None:
            raise RuntimeError(f"{self.url} returned no kv_transfer_params.hidden_states_path: not a capture "
                               "server (start it with `radiance-drafter capture-server-args`)")
        data = load_hidden_states(path)
        cleanup_hidden_states(path)
        return data

    def generate(self, ids: list[int], sampling: Sampling, seed: int) -> list[int]:
        out = self._post(self._body(ids, sampling, seed))
        self._fetch(out)
        return self._token_ids(out)

    @torch.no_grad()
    def hidden(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(taps [T, L, H] float32, final-norm output [T, H] float32) for one sequence, from the server."""
        data = self._fetch(self._post({"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}))
        hs, got = data["hidden_states"], data["token_ids"].tolist()
        if got != list(ids) or hs.dim() != 3 or hs.shape[:2] != (len(ids), len(self.aux)):
            raise RuntimeError(f"{self.url}: hidden states {tuple(hs.shape)} for {len(got)} tokens, expected "
                               f"({len(ids)}, {len(self.aux)}, H) for aux layers {self.aux} and the sent tokens; "
                               "is the server started with capture_server_args for these target_layer_ids?")
        hs = hs.float()
        last = hs[:, self.last_row]
        final = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        return hs[:, self.tap_rows], final
