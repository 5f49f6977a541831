"""Fixtures: the tiny model and its fake-quantised twin, and ONE vLLM server at a time for live tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def fake_quant_int4(w, group: int = 32):
    """Symmetric round-to-nearest int4 per ``group`` input channels: w ≈ round(w/s)·s, s = max|w|/7."""
    import torch

    g = w.float().reshape(w.shape[0], -1, group)
    s = g.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 7
    return (torch.round(g / s).clamp(-8, 7) * s).reshape(w.shape).to(w.dtype)


def build_twin(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose linear projections are int4-fake-quantised (the 'quantised twin')."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        tensors = load_file(f)
        save_file(
            {k: fake_quant_int4(v) if k.endswith("proj.weight") else v for k, v in tensors.items()},
            f,
            metadata={"format": "pt"},
        )
    return dst


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    from radiance_quant.tiny import build_tiny_qwen3

    base = tmp_path_factory.mktemp("tiny")
    ref = build_tiny_qwen3(base / "ref", seed=0)
    return ref, build_twin(ref, base / "twin")


class Served:
    """At most one vLLM server alive: ``use(model_dir, name)`` stops the current one if it differs."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.server = None
        self.model = None

    def use(self, model_dir: Path, name: str):
        from radiance_vllm.server import VLLMServer

        if self.model != model_dir:
            self.stop()
            self.server = VLLMServer(model_dir, self.workdir, args=["--max-logprobs", "-1"], served_name=name)
            self.server.start()
            self.model = model_dir
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server = self.model = None


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    s = Served(tmp_path_factory.mktemp("vllm"))
    yield s
    s.stop()
