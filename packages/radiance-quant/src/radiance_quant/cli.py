"""`radiance-quant` command line."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Radiance checkpoint tools.")


@app.callback()
def main() -> None:
    """Read, verify, build and convert Radiance checkpoints."""


class TinyKind(str, Enum):
    qwen3 = "qwen3"
    qwen3_next = "qwen3-next"


@app.command()
def tiny(
    kind: TinyKind = typer.Option(TinyKind.qwen3, help="Model family."),
    out: Path = typer.Option(..., help="Output directory."),
    seed: int = typer.Option(0, help="Seed (same seed -> identical bytes)."),
    dtype: str = typer.Option("float32", help="qwen3 only: float32 or bfloat16."),
    train_steps: int = typer.Option(200, help="qwen3 only: training steps on the shipped corpus."),
) -> None:
    """Build a deterministic tiny model + tokenizer."""
    from radiance_quant import tiny as t

    if kind is TinyKind.qwen3:
        t.build_tiny_qwen3(out, seed=seed, dtype=dtype, train_steps=train_steps)
    else:
        t.build_tiny_qwen3_next(out, seed=seed)
    typer.echo(str(out))
