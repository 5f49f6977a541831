"""The whole loop on a tiny target, as the tests and ``nox -s gates`` run it: capture the training and
held-out prompts, train a 2-layer drafter for a few hundred steps, and score the untrained and the
trained drafter with the offline proxy on the held-out captures."""

from __future__ import annotations

import json
import re
from pathlib import Path

from radiance_drafter.capture import CaptureSet, capture
from radiance_drafter.config import drafter_config_for_target
from radiance_drafter.model import DFlashDrafter, TargetHeads, load_drafter, save_drafter
from radiance_drafter.prompts import Prompt, split_heldout
from radiance_drafter.proxy import offline_proxy
from radiance_drafter.target import Sampling
from radiance_drafter.train import TrainConfig, train

SAMPLING = Sampling(temperature=0.0, max_tokens=64)
TRAIN = TrainConfig(epochs=10, batch_size=8, blocks_per_seq=32, lr=3e-3, warmup_steps=10, ckpt_every=40)
TAPS = (0, 1)


def prompts_from_corpus(text: str) -> list[Prompt]:
    """Raw-text prompts in a tiny target's training style: arithmetic questions, code heads, prose starts."""
    out = []
    for i, q in enumerate(re.findall(r"^(Question: .*)$", text, flags=re.M)):
        out.append(Prompt(f"arith-{i}", "arithmetic", prompt=q + "\nAnswer:"))
    for i, d in enumerate(re.findall(r"^(def \w+\(.*\):)$", text, flags=re.M)):
        out.append(Prompt(f"code-{i}", "code", prompt=d + "\n"))
    paras = [p for p in text.split("\n\n") if p[:1].isupper() and not p.startswith(("Question", "Answer"))]
    for i, p in enumerate(paras):
        out.append(Prompt(f"prose-{i}", "prose", prompt=" ".join(p.split()[:6])))
    return out


def round_robin(prompts: list[Prompt]) -> list[Prompt]:
    """Interleave sources: the i-th prompt of every source before any source's (i+1)-th."""
    rank: dict[str, int] = {}
    keyed = []
    for p in prompts:
        rank[p.source] = rank.get(p.source, -1) + 1
        keyed.append((rank[p.source], p.source, p))
    return [p for *_, p in sorted(keyed, key=lambda k: k[:2])]


def run(target: Path, prompts: list[Prompt], work: Path, n_heldout: int = 24, n_train: int = 96) -> dict:
    """Capture → train → proxies; returns {"train": summary, "proxy": {"untrained": ..., "trained": ...}}
    and writes it to ``work/gate.json``."""
    train_p, held_p = split_heldout(prompts, n_heldout, seed=0)
    capture(round_robin(train_p)[:n_train], target, work / "cap-train", TAPS, SAMPLING, shard_size=32)
    capture(held_p, target, work / "cap-heldout", TAPS, SAMPLING, shard_size=32)
    cfg = drafter_config_for_target(target, num_layers=2, target_layer_ids=TAPS, block_size=8,
                                    mask_token_id=0, num_key_value_heads=4)
    save_drafter(DFlashDrafter(cfg).init_weights(0), work / "init")
    summary = train(work / "init", work / "cap-train", target, work / "run", TRAIN)
    heads = TargetHeads.from_target(target)
    held = CaptureSet(work / "cap-heldout")
    proxies = {name: offline_proxy(load_drafter(d), heads, held, SAMPLING.temperature)
               for name, d in (("untrained", work / "init"), ("trained", work / "run" / "drafter"))}
    result = {"train": summary, "proxy": proxies}
    (work / "gate.json").write_text(json.dumps(result, indent=2))
    return result
