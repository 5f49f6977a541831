"""Shared fixtures: the tiny Qwen3 target (built once per session) and a three-source prompt set."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from radiance_drafter.prompts import Prompt
from radiance_drafter.tinyloop import prompts_from_corpus
from radiance_quant.tiny import build_tiny_qwen3, corpus


def pytest_addoption(parser):
    parser.addoption("--served", action="store_true",
                     help="run the opt-in served tests: the dflash A/B (two vLLM servers, ~10 min) and the "
                          "served capture of a quantized target (one server)")


def pytest_configure(config):
    config.addinivalue_line("markers", "served: starts extra vLLM servers (opt-in with --served)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--served"):
        skip = pytest.mark.skip(reason="opt-in: starts extra vLLM servers; run with --served")
        for item in items:
            if "served" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny CPU work runs fastest (and reproducibly) single-threaded on a shared machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), seed=0)


@pytest.fixture(scope="session")
def prompts() -> list[Prompt]:
    return prompts_from_corpus(corpus())
