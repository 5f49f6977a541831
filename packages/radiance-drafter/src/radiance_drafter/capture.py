"""Capture: answer every prompt with the target at the served sampling settings and store the tapped
hidden states, resumably.

Layout of a capture directory: ``shard-NNNNN.safetensors`` files, each holding for its samples
``{key}.tokens`` int32 [T] (prompt + answer), ``{key}.taps`` uint8 [T, L*H] (e4m3 codes),
``{key}.scale`` float32 [T, L] (see :mod:`radiance_drafter.codec`) and ``{key}.final`` bfloat16 [T, H]
(the target's final-norm output: ``lm_head(final)`` are its logits); and ``index.json`` with the capture
settings and, per shard, each sample's ``id``, ``source``, ``seed``, ``n_prompt``, ``n_tokens``.
A shard and then the index are written atomically once the shard is complete; a rerun skips the
prompts of finished shards and recomputes the rest, so an interrupted capture resumes to the same bytes.

Hidden states come from the target in-process (transformers, :class:`~radiance_drafter.target.TargetRunner`)
or, with ``hidden_url``, from a capture server (:class:`~radiance_drafter.target.ServedTarget`: the served
engine itself, for targets only vLLM runs); the directory format is the same, ``index.json`` records which.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from radiance_drafter.codec import dequantize, quantize
from radiance_drafter.model import write_json
from radiance_drafter.prompts import Prompt, prompt_seed
from radiance_drafter.target import Sampling, ServedGenerator, ServedTarget, TargetRunner, prompt_ids
from radiance_kernels.formats import e4m3

INDEX = "index.json"
FORMAT = "radiance-dflash-capture/1"


def capture(prompts: list[Prompt], target_dir: str | Path, out_dir: str | Path, layer_ids: tuple[int, ...],
            sampling: Sampling, shard_size: int = 64, answers_url: str | None = None,
            served_model: str | None = None, hidden_url: str | None = None, device: str = "cpu") -> Path:
    """Capture ``prompts`` into ``out_dir`` (resuming what is there); returns the index path.

    Answers: ``answers_url`` if given, else the capture server ``hidden_url`` if given (greedy only: its
    seeded sampling is not reproducible), else the in-process target. Hidden states: the capture server
    ``hidden_url`` if given, else the in-process target."""
    if hidden_url and not answers_url and sampling.temperature > 0:
        raise ValueError("capture: sampled answers (temperature > 0) from a capture server are not reproducible "
                         "under a seed (vLLM 0.32's extract_hidden_states path), so a resumed capture would differ; "
                         "take the answers from the target served plainly (answers_url / --answers-url)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"format": FORMAT, "target": str(target_dir), "target_layer_ids": list(layer_ids),
                "sampling": sampling.asdict(), "shard_size": shard_size,
                "answers": f"served:{served_model or target_dir}" if answers_url or hidden_url else "in-process",
                "hidden": f"served:{served_model or target_dir}" if hidden_url else "in-process"}
    index = _open_index(out, settings)
    done = {s["id"] for sh in index["shards"] for s in sh["samples"]}
    todo = [p for p in prompts if p.id not in done]
    if not todo:
        return out / INDEX
    runner = (ServedTarget(hidden_url, served_model or str(target_dir), target_dir, layer_ids) if hidden_url
              else TargetRunner(target_dir, layer_ids, device=device))
    gen = ServedGenerator(answers_url, served_model or str(target_dir)) if answers_url else runner
    n_done = sum(len(sh["samples"]) for sh in index["shards"])
    bar = tqdm(total=len(prompts), initial=len(prompts) - len(todo), desc="capture", unit="seq")
    for start in range(0, len(todo), shard_size):
        tensors, meta = {}, []
        for p in todo[start:start + shard_size]:
            ids = prompt_ids(runner.tokenizer, p)
            seed = prompt_seed(sampling.seed, p.id)
            seq = ids + gen.generate(ids, sampling, seed)
            taps, final = runner.hidden(seq)
            codes, scale = quantize(taps)
            key = f"{n_done:07d}"
            tensors.update({f"{key}.tokens": torch.tensor(seq, dtype=torch.int32), f"{key}.taps": codes,
                            f"{key}.scale": scale, f"{key}.final": final.to(torch.bfloat16)})
            meta.append({"key": key, "id": p.id, "source": p.source, "seed": seed, "n_prompt": len(ids),
                         "n_tokens": len(seq)})
            n_done += 1
            bar.update(1)
        name = f"shard-{len(index['shards']):05d}.safetensors"
        tmp = out / (name + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": FORMAT})
        tmp.replace(out / name)
        index["shards"].append({"file": name, "samples": meta})
        write_json(out / INDEX, index)
    bar.close()
    return out / INDEX


def _open_index(out: Path, settings: dict) -> dict:
    path = out / INDEX
    if not path.exists():
        index = {**settings, "shards": []}
        write_json(path, index)
        return index
    index = json.loads(path.read_text())
    diff = {k: (index.get(k), v) for k, v in settings.items() if index.get(k) != v}
    if diff:
        raise ValueError(f"{path}: capture settings differ from this run (stored, requested): {diff}")
    return index


@dataclass
class Sample:
    id: str
    source: str
    n_prompt: int
    tokens: torch.Tensor  # int64 [T]
    feats: torch.Tensor  # float32 [T, L*H]
    final: torch.Tensor  # float32 [T, H]


class CaptureSet:
    """Read access to a capture directory, sample by sample (shards are memory-mapped)."""

    def __init__(self, path: str | Path):
        self.dir = Path(path)
        if not (self.dir / INDEX).exists():
            raise FileNotFoundError(f"{self.dir}: no {INDEX} (not a capture directory)")
        self.index = json.loads((self.dir / INDEX).read_text())
        if self.index.get("format") != FORMAT:
            raise ValueError(f"{self.dir}: format {self.index.get('format')!r}, expected {FORMAT!r}")
        self.samples = [(sh["file"], s) for sh in self.index["shards"] for s in sh["samples"]]
        self._open: dict[str, object] = {}

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return tuple(self.index["target_layer_ids"])

    @property
    def sampling(self) -> Sampling:
        return Sampling(**self.index["sampling"])

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Sample:
        file, s = self.samples[i]
        if file not in self._open:
            self._open[file] = safe_open(str(self.dir / file), framework="pt")
        f, k = self._open[file], s["key"]
        return Sample(s["id"], s["source"], s["n_prompt"], f.get_tensor(f"{k}.tokens").long(),
                      dequantize(f.get_tensor(f"{k}.taps"), f.get_tensor(f"{k}.scale")),
                      f.get_tensor(f"{k}.final").float())

    def __iter__(self) -> Iterator[Sample]:
        return (self[i] for i in range(len(self)))


def agreement(a: CaptureSet, b: CaptureSet) -> dict:
    """How two captures of the same prompts agree (e.g. in-process vs served).

    Tokens and sample metadata must be equal. Taps: each side is e4m3 with a per-(token, layer) scale
    ``s = amax/448``, so each dequantised element lies within half an e4m3 step of its source: 2^-4·|x| for
    normals, s·2^-10 in the subnormal range. Sources that differ only by kernel rounding (~1e-6 relative)
    round to the same code or to adjacent ones, so ``|a - b| ≤ 2^-3·max(|a|, |b|) + s·2^-9`` element-wise
    (``taps_excess`` ≤ 0). Final-norm outputs (bf16, 2^-9 relative) must agree to 2^-7 of the row's amax.
    """
    meta_equal = [s for _, s in a.samples] == [s for _, s in b.samples]
    out = {"sequences": len(a), "meta_equal": meta_equal, "tokens_equal": meta_equal, "taps_excess": -math.inf,
           "taps_max_rel": 0.0, "final_max_rel": 0.0, "codes_differ": 0, "codes": 0}
    if not meta_equal:
        return out
    for x, y in zip(a, b, strict=True):
        if not torch.equal(x.tokens, y.tokens):
            out["tokens_equal"] = False
            continue
        t, n_layers = len(x.tokens), len(a.layer_ids)
        xs, ys = x.feats.view(t, n_layers, -1), y.feats.view(t, n_layers, -1)
        scale = xs.abs().amax(-1, keepdim=True) / e4m3.E4M3_MAX
        bound = 2.0**-3 * torch.maximum(xs.abs(), ys.abs()) + scale * 2.0**-9
        amax = xs.abs().amax().clamp_min(1e-30)
        out["taps_excess"] = max(out["taps_excess"], ((xs - ys).abs() - bound).max().item())
        out["taps_max_rel"] = max(out["taps_max_rel"], ((xs - ys).abs().max() / amax).item())
        row_amax = x.final.abs().amax(-1, keepdim=True).clamp_min(1e-30)
        out["final_max_rel"] = max(out["final_max_rel"], ((x.final - y.final).abs() / row_amax).max().item())
        out["codes_differ"] += int((quantize(xs)[0] != quantize(ys)[0]).sum())
        out["codes"] += xs.numel()
    out["ok"] = (out["tokens_equal"] and out["taps_excess"] <= 0 and out["final_max_rel"] <= 2.0**-7
                 and out["codes_differ"] <= 0.01 * max(out["codes"], 1))
    return out
