"""Shared fixtures. Served tests keep at most one vLLM server alive: each server is module-scoped and
lives in its own test module; the tiny float model is built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from radiance_vllm.server import VLLMServer

#: One process instead of three (no engine-core / worker subprocesses): ~1 min less start on 2 cores.
SINGLE_PROCESS = {"args": ["--distributed-executor-backend", "uni"], "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}


@pytest.fixture(scope="session")
def tiny_float(tmp_path_factory) -> Path:
    from radiance_quant.tiny import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny") / "tiny-qwen3", seed=0)


def served(model: Path, workdir: Path, env: dict[str, str] | None = None, dtype: str = "float32",
           launcher: bool = False) -> VLLMServer:
    """A started server for ``model`` (full prompt logprobs enabled); the caller stops it."""
    server = VLLMServer(model=model, workdir=workdir, dtype=dtype, launcher=launcher,
                        args=["--max-logprobs", "-1", *SINGLE_PROCESS["args"]],
                        env={**SINGLE_PROCESS["env"], **(env or {})})
    return server.start(timeout=900)
