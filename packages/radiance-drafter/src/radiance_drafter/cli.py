"""``radiance-drafter``: init → capture → train → proxy / served-eval → compare → export."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.table import Table

from radiance_drafter.model import write_json
from radiance_drafter.target import Sampling

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


def _ids(text: str | None) -> tuple[int, ...] | None:
    return tuple(int(x) for x in text.split(",")) if text else None


def _sampling(temperature: float, top_p: float, top_k: int, max_tokens: int, seed: int) -> Sampling:
    return Sampling(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, seed=seed)


def _threads(n: int) -> None:
    if n:
        torch.set_num_threads(n)


def _save(result: dict, out: Path | None) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(out, result)
        console.print(f"wrote {out}")


@app.command()
def init(target: Path, out: Path, layers: int = typer.Option(2, help="drafter decoder layers"),
         taps: int = typer.Option(5, help="number of target layers to tap (evenly spaced)"),
         layer_ids: str = typer.Option(None, help="explicit tapped target layers, e.g. 1,16,31"),
         block_size: int = 8, mask_token_id: int = typer.Option(..., help="token id filling the masked slots"),
         intermediate_size: int = None, kv_heads: int = None, seed: int = 0):
    """Write an untrained drafter shaped for TARGET."""
    from radiance_drafter.config import drafter_config_for_target
    from radiance_drafter.model import DFlashDrafter, save_drafter

    cfg = drafter_config_for_target(target, num_layers=layers, num_features=taps, target_layer_ids=_ids(layer_ids),
                                    block_size=block_size, mask_token_id=mask_token_id,
                                    intermediate_size=intermediate_size, num_key_value_heads=kv_heads)
    save_drafter(DFlashDrafter(cfg).init_weights(seed), out)
    console.print(f"{out}: taps {list(cfg.target_layer_ids)}, block {cfg.block_size}")


@app.command()
def split(prompts: Path, heldout: int = typer.Option(..., help="held-out prompts, round-robin over sources"),
          train_out: Path = typer.Option(...), heldout_out: Path = typer.Option(...), seed: int = 0):
    """Split a prompt JSONL into training and held-out sets."""
    from radiance_drafter.prompts import load_prompts, split_heldout, write_prompts

    tr, ho = split_heldout(load_prompts(prompts), heldout, seed)
    write_prompts(train_out, tr)
    write_prompts(heldout_out, ho)
    console.print(f"train {len(tr)}, held-out {len(ho)}")


@app.command()
def capture(prompts: Path, target: Path, out: Path,
            drafter: Path = typer.Option(None, help="take the tapped layers from this drafter's config"),
            layer_ids: str = typer.Option(None, help="tapped target layers, e.g. 1,16,31"),
            temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, max_tokens: int = 1024, seed: int = 0,
            shard_size: int = 64, answers_url: str = typer.Option(None, help="served target for the answers"),
            hidden_url: str = typer.Option(None, help="capture server (see capture-server-args) for the hidden "
                                           "states (and the answers unless --answers-url)"),
            served_model: str = None, device: str = "cpu", threads: int = 0):
    """Answer PROMPTS with TARGET at the served sampling settings and store tapped hidden states (resumes)."""
    from radiance_drafter.capture import capture as run
    from radiance_drafter.config import DrafterConfig
    from radiance_drafter.prompts import load_prompts

    _threads(threads)
    ids = DrafterConfig.load(drafter).target_layer_ids if drafter else _ids(layer_ids)
    if not ids:
        raise typer.BadParameter("give --drafter or --layer-ids")
    run(load_prompts(prompts), target, out, ids, _sampling(temperature, top_p, top_k, max_tokens, seed),
        shard_size=shard_size, answers_url=answers_url, served_model=served_model, hidden_url=hidden_url,
        device=device)


@app.command("capture-server-args")
def capture_server_args(target: Path, storage: Path = typer.Option(..., help="where the server writes hidden "
                                                                    "states (a directory the capture can read)"),
                        drafter: Path = typer.Option(None, help="take the tapped layers from this drafter's config"),
                        layer_ids: str = typer.Option(None, help="tapped target layers, e.g. 1,16,31")):
    """Print, one per line, the vLLM server arguments that make TARGET's server a capture server (for capture
    --hidden-url); in bash: mapfile -t CAP < <(radiance-drafter capture-server-args ...); ... "${CAP[@]}"."""
    from radiance_drafter.config import DrafterConfig
    from radiance_drafter.target import capture_server_args as args

    ids = DrafterConfig.load(drafter).target_layer_ids if drafter else _ids(layer_ids)
    if not ids:
        raise typer.BadParameter("give --drafter or --layer-ids")
    print("\n".join(args(target, ids, storage)))


@app.command()
def train(init_dir: Path, capture_dir: Path, target: Path, out: Path, epochs: int = 2, batch_size: int = 8,
          blocks_per_seq: int = 16, lr: float = 5e-4, warmup_steps: int = 20, weight_decay: float = 0.0,
          clip_norm: float = 1.0, seed: int = 0, ckpt_every: int = 50, dtype: str = "float32", device: str = "cpu",
          offload_optimizer: bool = False, max_steps: int = typer.Option(None, help="stop after this global step"),
          threads: int = 0):
    """Train (or resume) a drafter on a capture; writes OUT/drafter, OUT/loss.json and OUT/loss.png."""
    from radiance_drafter.train import TrainConfig
    from radiance_drafter.train import train as run

    _threads(threads)
    cfg = TrainConfig(epochs=epochs, batch_size=batch_size, blocks_per_seq=blocks_per_seq, lr=lr,
                      warmup_steps=warmup_steps, weight_decay=weight_decay, clip_norm=clip_norm, seed=seed,
                      ckpt_every=ckpt_every, dtype=dtype, device=device, offload_optimizer=offload_optimizer)
    console.print(run(init_dir, capture_dir, target, out, cfg, max_steps=max_steps))


@app.command()
def proxy(drafter: Path, capture_dir: Path, target: Path, out: Path = None,
          temperature: float = typer.Option(None, help="default: the capture's sampling temperature"),
          top_p: float = typer.Option(None, help="default: the capture's top-p"),
          top_k: int = typer.Option(None, help="default: the capture's top-k"),
          seed: int = 0, device: str = "cpu", threads: int = 0):
    """Offline proxy: prefix-expected accepted tokens per block on a (held-out) capture."""
    from radiance_drafter.capture import CaptureSet
    from radiance_drafter.model import TargetHeads, load_drafter
    from radiance_drafter.proxy import offline_proxy

    _threads(threads)
    data = CaptureSet(capture_dir)
    t = data.sampling.temperature if temperature is None else temperature
    r = offline_proxy(load_drafter(drafter).to(device), TargetHeads.from_target(target).to(device), data, t,
                      seed=seed, device=device, top_p=data.sampling.top_p if top_p is None else top_p,
                      top_k=data.sampling.top_k if top_k is None else top_k)
    r.update(drafter=str(drafter), capture=str(capture_dir))
    _table("offline proxy: accepted tokens per draft (decode walk) and per block (every anchor)", r,
           ("acc_per_draft", "acc_per_block"))
    _save(r, out)


@app.command("served-eval")
def served_eval(prompts: Path, url: str = typer.Option(...), model: str = typer.Option(...),
                tokenizer: Path = typer.Option(..., help="the target's tokenizer directory"),
                label: str = typer.Option(..., help="the drafter's name in the report"),
                temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0, max_tokens: int = 512, seed: int = 0,
                out: Path = None):
    """Served acceptance per source from the spec-decode counters of a running server."""
    from radiance_drafter.prompts import load_prompts
    from radiance_drafter.served import ServedEval

    r = ServedEval(url, model, tokenizer).run(load_prompts(prompts),
                                              _sampling(temperature, top_p, top_k, max_tokens, seed), label)
    _table(f"served: {label}", r, ("acc_per_draft", "tokens_per_s"))
    _save(r, out)


@app.command()
def compare(baseline: Path, candidate: Path, min_tokens: int = 50_000, min_gain: float = 0.02, out: Path = None):
    """Promote rule: per-source wins/losses; refuses a verdict below --min-tokens held-out tokens."""
    from radiance_drafter.compare import compare as run

    r = run(json.loads(baseline.read_text()), json.loads(candidate.read_text()), min_tokens, min_gain)
    t = Table(title=f"{r['metric']}: baseline {baseline.name} vs candidate {candidate.name}")
    for col in ("source", "baseline", "candidate", "rel", "outcome", "tokens"):
        t.add_column(col)
    for row in r["per_source"]:
        t.add_row(row["source"], f"{row['baseline']:.3f}", f"{row['candidate']:.3f}", f"{row['rel']:+.1%}",
                  row["outcome"], str(row["tokens"]))
    console.print(t)
    console.print(f"overall {r['baseline']:.3f} -> {r['candidate']:.3f} ({r['gain']:+.1%}); wins {r['wins']}, "
                  f"losses {r['losses']}, ties {r['ties']}; verdict: [bold]{r['verdict']}[/bold]")
    for reason in r["refusals"]:
        console.print(f"  refused: {reason}")
    _save(r, out)


@app.command()
def export(drafter: Path, out: Path, format: str = typer.Option("bf16", help="bf16 or fp8 (block-128)")):  # noqa: A002
    """Export a trained drafter for serving."""
    from radiance_drafter.export import export as run

    console.print(f"wrote {run(drafter, out, format)}")


@app.command("check-vllm")
def check_vllm(drafter: Path, target: Path,
               kernels: bool = typer.Option(True, help="--no-kernels: build vLLM's FP8 parameters and loaders but "
                                            "not its GEMM kernels (a CPU without AMX has none)"),
               reference: Path = typer.Option(None, help="the bf16 export of the same drafter: every parameter "
                                              "must match it (FP8 ones within one e4m3 rounding)")):
    """Load DRAFTER with vLLM's dflash model class in-process; fails on missing or unexpected tensors."""
    from radiance_drafter.vllm_check import check_vllm_load

    r = check_vllm_load(drafter, target, kernels=kernels, reference=reference)
    console.print({k: v for k, v in r.items() if k != "vllm_parameters"})


def _table(title: str, r: dict, metrics: tuple[str, ...]) -> None:
    t = Table(title=title)
    for col in ("source", *metrics, "drafts", "completion tokens", "accept rate by position"):
        t.add_column(col)
    for src, x in [*r["per_source"].items(), ("ALL", r)]:
        t.add_row(src, *(f"{x[m]:.3f}" for m in metrics), str(x["drafts"]), str(x["completion_tokens"]),
                  " ".join(f"{v:.2f}" for v in x["accept_rate_by_pos"]))
    console.print(t)
