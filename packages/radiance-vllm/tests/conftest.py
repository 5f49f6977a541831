"""Shared fixtures. Served tests keep at most one vLLM server alive: each server is module-scoped and
lives in its own test module; the tiny float model is built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from radiance_vllm.server import VLLMServer

#: One process instead of three (no engine-core / worker subprocesses): ~1 min less start on 2 cores.
SINGLE_PROCESS = {"args": ["--distributed-executor-backend", "uni"], "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}


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
           launcher: bool = False, tp: int = 1) -> VLLMServer:
    """A started server for ``model`` (full prompt logprobs enabled; ``tp`` > 1: that many tensor-parallel
    workers); the caller stops it."""
    procs = SINGLE_PROCESS if tp == 1 else tensor_parallel(tp)
    server = VLLMServer(model=model, workdir=workdir, dtype=dtype, launcher=launcher,
                        args=["--max-logprobs", "-1", *procs["args"]], env={**procs["env"], **(env or {})})
    return server.start(timeout=900)
