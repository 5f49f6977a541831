"""``radiance`` console script: ``radiance serve MODEL [options]`` and ``radiance knobs``."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from radiance_vllm import knobs as knobs_mod
from radiance_vllm.launcher import ServeOptions, check_eager, render, vllm_command

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(help="checkpoint directory (or cached hub id)")],
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="name clients use in requests")] = None,
    tensor_parallel_size: Annotated[int, typer.Option("--tensor-parallel-size", "-tp")] = 1,
    speculative_method: Annotated[str, typer.Option(help="none/ngram/draft_model/dflash/eagle3/mtp")] = "none",
    speculative_depth: Annotated[int, typer.Option(help="draft tokens per step")] = 0,
    drafter: Annotated[str | None, typer.Option(help="drafter checkpoint path")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(help="fraction of GPU memory vLLM may use")] = None,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto / fp8 / fp8_e4m3 / ...")] = "auto",
    max_model_len: Annotated[int | None, typer.Option(help="max context length")] = None,
    chunk_size: Annotated[int | None, typer.Option(help="prefill chunk size (max batched tokens)")] = None,
    dtype: Annotated[str, typer.Option(help="model dtype")] = "auto",
    enforce_eager: Annotated[bool, typer.Option(help="no torch.compile / graphs")] = False,
    knob: Annotated[list[str] | None, typer.Option(help="RADIANCE_NAME=VALUE, repeatable")] = None,
    dry_run: Annotated[bool, typer.Option(help="print the command and exit")] = False,
) -> None:
    """Start vLLM's OpenAI server on MODEL with the Radiance plugin; extra args go to vLLM verbatim."""
    env = dict(os.environ)
    env.pop(knobs_mod.PRINTED_MARK, None)
    for item in knob or []:
        name, eq, value = item.partition("=")
        if not eq or not name.startswith(knobs_mod.PREFIX):
            raise typer.BadParameter(f"--knob {item!r}: expected RADIANCE_NAME=VALUE")
        env[name] = value
    try:
        settings = knobs_mod.Settings.from_env(env)
    except knobs_mod.KnobError as exc:
        raise typer.BadParameter(str(exc)) from None
    opts = ServeOptions(model=model, host=host, port=port, served_model_name=served_model_name,
                        tensor_parallel_size=tensor_parallel_size, speculative_method=speculative_method,
                        speculative_depth=speculative_depth, drafter=drafter,
                        gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                        max_model_len=max_model_len, chunk_size=chunk_size, dtype=dtype,
                        enforce_eager=enforce_eager, extra=list(ctx.args))
    try:
        check_eager(settings, opts)
        cmd = vllm_command(opts)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    forwarded = settings.as_env()
    print(f"[radiance] compile-cache key {settings.compile_cache_key()}; command:", flush=True)
    print(render(cmd, forwarded), flush=True)
    if dry_run:
        return
    env.update(forwarded)
    os.execve(cmd[0], cmd, env)


@app.command()
def knobs(markdown: Annotated[bool, typer.Option(help="print the README table")] = False) -> None:
    """Print the resolved RADIANCE_* settings (or the knob table)."""
    print(knobs_mod.markdown_table() if markdown else knobs_mod.Settings.from_env().table())


if __name__ == "__main__":
    app()
