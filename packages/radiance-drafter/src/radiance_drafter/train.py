"""Self-distillation training of the DFlash drafter on a capture.

Objective: weighted CE over each block's mask slots, weight exp(-(k-1)/4) for slot k (see
:mod:`radiance_drafter.blocks`); each epoch draws fresh random anchors per sequence. The target's
embedding and LM head are frozen buffers; the optimizer is AdamW on fp32 masters
(:class:`~radiance_drafter.optim.MasterAdamW`). LR: linear warmup, then cosine to 10%.

Everything random is a pure function of (seed, epoch, sample): the epoch's order and each sequence's
anchors. A checkpoint (drafter, optimizer, step, loss history) is written atomically every
``ckpt_every`` steps, so a resumed run reproduces the uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from radiance_drafter.blocks import build_blocks, position_weights, sample_anchors, weighted_ce
from radiance_drafter.capture import CaptureSet, Sample
from radiance_drafter.model import DFlashDrafter, TargetHeads, load_drafter, save_drafter, write_json
from radiance_drafter.optim import MasterAdamW

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 2
    batch_size: int = 8
    blocks_per_seq: int = 16
    lr: float = 5e-4
    warmup_steps: int = 20
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    seed: int = 0
    ckpt_every: int = 50
    dtype: str = "float32"
    device: str = "cpu"
    offload_optimizer: bool = False


def _mix(*xs: int) -> int:
    h = 0
    for x in xs:
        h = (h * 1_000_003 + x) % 2**62
    return h


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    return torch.randperm(n, generator=torch.Generator().manual_seed(_mix(seed, epoch))).tolist()


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def check_compatible(drafter: DFlashDrafter, heads: TargetHeads, data: CaptureSet) -> None:
    """The drafter, the target's heads and the capture must agree on taps, width and vocabulary."""
    cfg = drafter.cfg
    if tuple(cfg.target_layer_ids) != data.layer_ids:
        raise ValueError(f"drafter taps layers {list(cfg.target_layer_ids)}, "
                         f"capture {data.dir} has {list(data.layer_ids)}")
    if tuple(heads.embed.shape) != (cfg.vocab_size, cfg.hidden_size) or heads.lm_head.shape != heads.embed.shape:
        raise ValueError(f"target embedding {tuple(heads.embed.shape)} / lm_head {tuple(heads.lm_head.shape)} do not "
                         f"match the drafter's [vocab {cfg.vocab_size}, hidden {cfg.hidden_size}]")
    if len(data) and data[0].feats.shape[1] != cfg.num_features * cfg.hidden_size:
        raise ValueError(f"capture {data.dir} features are {data[0].feats.shape[1]} wide, the drafter's fc reads "
                         f"{cfg.num_features} x {cfg.hidden_size}")


def forward_blocks(drafter: DFlashDrafter, heads: TargetHeads, samples: list[Sample], anchors: list[torch.Tensor],
                   device: str):
    """Drafter logits [B, Q, V] for the blocks at ``anchors`` of ``samples`` (padded batch) and the blocks."""
    cfg = drafter.cfg
    t = max(len(s.tokens) for s in samples)
    feats = torch.zeros(len(samples), t, samples[0].feats.shape[1])
    for i, s in enumerate(samples):
        feats[i, : len(s.tokens)] = s.feats
    blocks = build_blocks([s.tokens for s in samples], anchors, cfg.block_size, cfg.mask_token_id, t).to(device)
    ctx_pos = torch.arange(t, device=device).expand(len(samples), t)
    hidden = drafter(feats.to(device), ctx_pos, heads.embed_ids(blocks.q_ids), blocks.q_pos, blocks.visible)
    return heads.logits(hidden), blocks


def train(init_dir: str | Path, capture_dir: str | Path, target_dir: str | Path, out_dir: str | Path,
          cfg: TrainConfig, max_steps: int | None = None) -> dict:
    """Train (or resume) into ``out_dir``; stops after global step ``max_steps`` if given. Returns the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = CaptureSet(capture_dir)
    dtype = DTYPES[cfg.dtype]
    drafter = load_drafter(init_dir, dtype).to(cfg.device)
    heads = TargetHeads.from_target(target_dir, dtype).to(cfg.device)
    check_compatible(drafter, heads, data)
    opt = MasterAdamW(drafter.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                      state_device="cpu" if cfg.offload_optimizer else None)
    settings = {"train": asdict(cfg), "init": str(init_dir), "capture": str(capture_dir), "target": str(target_dir)}
    history = _resume(out, settings, drafter, opt)
    spe = math.ceil(len(data) / cfg.batch_size)
    total = cfg.epochs * spe
    stop = total if max_steps is None else min(total, max_steps)
    weights = position_weights(drafter.cfg.block_size).to(cfg.device)
    bar = tqdm(total=total, initial=len(history["loss"]), desc="train", unit="step")
    drafter.train()
    for step in range(len(history["loss"]), stop):
        epoch, j = divmod(step, spe)
        idx = epoch_order(len(data), cfg.seed, epoch)[j * cfg.batch_size:(j + 1) * cfg.batch_size]
        samples = [data[i] for i in idx]
        anchors = [sample_anchors(s.n_prompt, len(s.tokens), cfg.blocks_per_seq,
                                  torch.Generator().manual_seed(_mix(cfg.seed, epoch, i)))
                   for s, i in zip(samples, idx, strict=True)]
        logits, blocks = forward_blocks(drafter, heads, samples, anchors, cfg.device)
        loss, _ = weighted_ce(logits, blocks, weights)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), cfg.clip_norm)
        lr = lr_at(step, total, cfg)
        opt.step(lr)
        history["loss"].append(loss.item())
        history["lr"].append(lr)
        history["epoch"].append(epoch)
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if (step + 1) % cfg.ckpt_every == 0 or step + 1 == stop:
            _checkpoint(out, step + 1, drafter, opt, history)
    bar.close()
    finished = len(history["loss"]) == total
    if finished:
        save_drafter(drafter, out / "drafter")
    write_json(out / "loss.json", history)
    plot_loss(history, out / "loss.png")
    return {"steps": len(history["loss"]), "total_steps": total, "finished": finished,
            "final_loss": history["loss"][-1] if history["loss"] else None}


def _ckpt_dirs(out: Path) -> list[Path]:
    return sorted((out / "ckpt").glob("step-*[0-9]"))


def _checkpoint(out: Path, step: int, drafter: DFlashDrafter, opt, history: dict) -> None:
    final = out / "ckpt" / f"step-{step:07d}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous() for k, v in drafter.state_dict().items()}, str(tmp / "drafter.safetensors"))
    torch.save(opt.state_dict(), tmp / "optim.pt")
    write_json(tmp / "history.json", history)
    shutil.rmtree(final, ignore_errors=True)
    tmp.replace(final)
    for old in _ckpt_dirs(out)[:-2]:
        shutil.rmtree(old)


def _resume(out: Path, settings: dict, drafter: DFlashDrafter, opt) -> dict:
    path = out / "settings.json"
    if path.exists():
        stored = json.loads(path.read_text())
        if stored != settings:
            raise ValueError(f"{path}: this run's settings differ from the stored ones; use a new out dir\n"
                             f"stored: {stored}\nnow:    {settings}")
    else:
        write_json(path, settings)
    ckpts = _ckpt_dirs(out)
    if not ckpts:
        return {"loss": [], "lr": [], "epoch": []}
    last = ckpts[-1]
    drafter.load_state_dict(load_file(str(last / "drafter.safetensors")), strict=True)
    opt.load_state_dict(torch.load(last / "optim.pt", weights_only=True))
    return json.loads((last / "history.json").read_text())


def plot_loss(history: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(1, len(history["loss"]) + 1), history["loss"], lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("weighted CE (nats)")
    ax.set_title("DFlash drafter training loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
