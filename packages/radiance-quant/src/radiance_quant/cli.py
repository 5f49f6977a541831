"""`radiance-quant` command line. Every command exits non-zero with one message naming the file and
tensor on bad input; builders write atomically into OUT and resume an interrupted run."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path

import typer

from radiance_quant.io import CheckpointError, write_json

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Radiance checkpoint tools.")


@app.callback()
def main() -> None:
    """Read, verify, build and convert Radiance checkpoints."""


def _run(fn, report: Path | None = None):
    try:
        out = fn()
    except CheckpointError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if report is not None:
        write_json(report, out)
    return out


class TinyKind(StrEnum):
    qwen3 = "qwen3"
    qwen3_next = "qwen3-next"
    int4 = "paroquant-int4"
    int5 = "paroquant-int5"
    mxfp4 = "paroquant-mxfp4"
    nvfp4 = "nvfp4"
    nvfp4_mxfp4 = "nvfp4-mxfp4"


@app.command()
def tiny(
    kind: TinyKind = typer.Option(TinyKind.qwen3, help="Model family or checkpoint format."),
    out: Path = typer.Option(..., help="Output directory."),
    seed: int = typer.Option(0, help="Seed (same seed -> identical bytes)."),
    dtype: str = typer.Option("float32", help="qwen3-based kinds: float32 or bfloat16."),
    train_steps: int = typer.Option(200, help="qwen3-based kinds: training steps on the shipped corpus."),
    family: str = typer.Option("qwen3", help="Quantized kinds: base family, qwen3, qwen3-tp2, qwen3-next or "
                               "qwen3-next-dense."),
) -> None:
    """Build a deterministic tiny model, or a tiny checkpoint of a quantized format."""
    from radiance_quant import tiny as t

    if kind is TinyKind.qwen3:
        _run(lambda: t.build_tiny_qwen3(out, seed=seed, dtype=dtype, train_steps=train_steps))
    elif kind is TinyKind.qwen3_next:
        _run(lambda: t.build_tiny_qwen3_next(out, seed=seed))
    else:
        _run(lambda: t.build_tiny_checkpoint(out, kind.value, seed, dtype, train_steps, family))
    typer.echo(str(out))


@app.command()
def verify(
    checkpoint: Path,
    base: Path = typer.Option(None, help="The bf16 model it was made from: also checks nibble order + rotation."),
    report: Path = typer.Option(None, help="Write the JSON report here."),
    identity_groups: int = typer.Option(4, help="128-groups per linear for the dense-vs-Givens identity (0 = all)."),
) -> None:
    """Verify a ParoQuant int4 / int5 or MXFP4-PARO checkpoint: shapes, dtypes, pairs, theta, scales, identity."""
    from radiance_quant.paroquant import verify as run

    r = _run(lambda: run(checkpoint, base=base, groups=identity_groups), report)
    typer.echo(
        f"OK {len(r['linears'])} quantized linears, max identity rel {r['max_identity_rel']:.2e}, "
        f"unquantized: {sorted(r['unquantized'])}"
    )


class Fmt(StrEnum):
    int4 = "int4"
    int5 = "int5"
    mxfp4 = "mxfp4"


@app.command()
def build(
    base: Path,
    out: Path,
    fmt: Fmt = typer.Option(..., "--format", help="int4 | int5 | mxfp4 (MXFP4-PARO)."),
    rotations: Path = typer.Option(None, help="ParoQuant checkpoint whose rotations to use (default: random)."),
    seed: int = typer.Option(0, help="Seed of the random rotations (without --rotations)."),
    pow2: bool = typer.Option(False, help="int4/int5: power-of-two scales (seeds: 2.8x worse KL)."),
    rule: str = typer.Option("mse", help="mxfp4 exponent rule: mse | ocp."),
) -> None:
    """Build a rotated int4 / int5 / MXFP4-PARO checkpoint from a base model."""
    if pow2:
        typer.echo("warning: power-of-two scales measured 2.8x worse KL than fp16 scales in the seeds", err=True)
    from radiance_quant.build import build as run

    r = _run(lambda: run(base, out, fmt.value, rotations=rotations, seed=seed, pow2=pow2, rule=rule))
    typer.echo(f"{out}: {len(r['units_written'])} units written, {len(r['units_resumed'])} resumed, {r['seconds']} s")


@app.command("nvfp4-to-mxfp4")
def nvfp4_to_mxfp4(
    src: Path,
    out: Path,
    rule: str = typer.Option("mse", help="Exponent rule: mse | ocp."),
    fp8_layers: str = typer.Option("mxfp4", help="FP8 per-channel layers to: mxfp4 | bf16."),
    in_proj_ab: bool = typer.Option(False, help="Also requantise bf16 GDN in_proj_a/b to MXFP4."),
) -> None:
    """Convert a compressed-tensors NVFP4 checkpoint to MXFP4 (lm_head to bf16)."""
    from radiance_quant.nvfp4 import convert

    r = _run(lambda: convert(src, out, rule=rule, fp8_layers=fp8_layers, in_proj_ab=in_proj_ab))
    typer.echo(f"{out}: {len(r['units_written'])} units written, {len(r['units_resumed'])} resumed, {r['seconds']} s")


@app.command()
def study(
    reference: Path,
    other: list[str] = typer.Option([], help="LABEL=DIR, repeatable."),
    direct: list[str] = typer.Option(
        [], help="Direct (unrotated) formats of the reference: int4 int5 mxfp4-ocp mxfp4-mse."
    ),
    report: Path = typer.Option(None, help="Write the JSON report here."),
) -> None:
    """Weight error (relRMS, dB) of each checkpoint's linears against the reference."""
    from radiance_quant import study as s

    for o in other:
        if "=" not in o:
            typer.echo(f"error: --other {o!r} must be LABEL=DIR", err=True)
            raise typer.Exit(2)
    others = dict(o.split("=", 1) for o in other)
    r = _run(lambda: s.study(reference, others, tuple(direct)), report)
    typer.echo(s.table(r))


@app.command()
def inspect(checkpoint: Path) -> None:
    """Print every tensor's name, dtype, shape and shard (headers only)."""
    from radiance_quant.io import Checkpoint

    ck = _run(lambda: Checkpoint(checkpoint))
    json.dump(
        {n: [str(ck.spec(n)[0]), list(ck.spec(n)[1]), ck.file_of(n).name] for n in ck.names()}, sys.stdout, indent=1
    )
    typer.echo("")
