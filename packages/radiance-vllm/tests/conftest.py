"""Shared fixtures. Served tests keep at most one vLLM server alive: each server is module-scoped and
lives in its own test module; the tiny float model is built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from radiance_vllm.server import VLLMServer


@pytest.fixture(scope="session")
def tiny_float(tmp_path_factory) -> Path:
    from radiance_quant.tiny import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "tiny-qwen3", seed=0)


def tensor_parallel(tp: int) -> dict:
    """vLLM arguments and environment for ``tp`` CPU workers, one process each, bound round-robin to the cores this
    process may use (vLLM's automatic binding wants a NUMA node per worker)."""
    cpus = sorted(os.sched_getaffinity(0))
    return {"args": ["--tensor-parallel-size", str(tp), "--distributed-executor-backend", "mp"],
            "env": {"VLLM_CPU_OMP_THREADS_BIND": "|".join(str(cpus[i % len(cpus)]) for i in range(tp))}}


def served(model: Path, workdir: Path, env: dict[str, str] | None = None, dtype: str = "float32",
           tp: int = 1) -> VLLMServer:
    """A started server for ``model`` (full prompt logprobs enabled; ``tp`` > 1: that many tensor-parallel
    workers); the caller stops it."""
    procs = {"args": [], "env": {}} if tp == 1 else tensor_parallel(tp)
    server = VLLMServer(model=model, workdir=workdir, dtype=dtype, single_process=tp == 1,
                        args=["--max-logprobs", "-1", *procs["args"]], env={**procs["env"], **(env or {})})
    return server.start(timeout=900)


def greedy_and_scored(model: Path, workdir: Path, sequences: list[list[int]] | None = None, **served_kw) -> dict:
    """One server's greedy completions of :data:`~radiance_vllm.served_checks.PROMPTS` (16 tokens), full prompt
    log-probabilities of ``sequences`` (default: each prompt with its own completion) and its log."""
    import json

    from radiance_vllm.served_checks import PROMPTS, greedy, prompt_logprobs

    server = served(model, workdir, **served_kw)
    try:
        outs = [greedy(server, p, 16) for p in PROMPTS]
        vocab = json.loads((model / "config.json").read_text())["vocab_size"]
        lps = [prompt_logprobs(server, seq, vocab) for seq in sequences or [ids + toks for ids, toks in outs]]
        return {"greedy": outs, "logprobs": lps, "log": server.log_path.read_text()}
    finally:
        server.stop()


def assert_runs_agree(a: dict, c: dict, logprob_tol: float, kl_tol: float) -> None:
    """Two :func:`greedy_and_scored` runs that scored the same sequences (``a``'s): max |Δ log p| per prompt below
    ``logprob_tol``, KL(c ‖ a) per prompt below ``kl_tol``, and where the greedy completions part, the two candidates
    within 2 x ``logprob_tol`` of each other under ``c`` (a near tie). Prints the figures."""
    from radiance_vllm.served_checks import kl, tie_margins

    diffs = [float((x - y).abs().max()) for x, y in zip(a["logprobs"], c["logprobs"], strict=True)]
    kls = [kl(y, x) for x, y in zip(a["logprobs"], c["logprobs"], strict=True)]
    margins = tie_margins(a["greedy"], c["greedy"], c["logprobs"])
    print(f"\nmax |d logprob| per prompt {diffs}, KL {kls}, greedy tie margins {margins}")
    assert max(diffs) < logprob_tol and max(kls) < kl_tol, (diffs, kls)
    assert all(m is None or m < 2 * logprob_tol for m in margins), margins
