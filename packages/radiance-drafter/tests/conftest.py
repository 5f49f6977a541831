"""Shared fixtures: the tiny Qwen3 target (built once per session) and a three-source prompt set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from radiance_drafter.prompts import Prompt
from radiance_quant.tiny import build_tiny_qwen3, corpus


def tiny_prompts() -> list[Prompt]:
    """Raw-text prompts in the tiny target's training style: arithmetic questions, code heads, prose starts."""
    text = corpus()
    out = []
    for i, q in enumerate(re.findall(r"^(Question: .*)$", text, flags=re.M)):
        out.append(Prompt(f"arith-{i}", "arithmetic", prompt=q + "\nAnswer:"))
    for i, d in enumerate(re.findall(r"^(def \w+\(.*\):)$", text, flags=re.M)):
        out.append(Prompt(f"code-{i}", "code", prompt=d + "\n"))
    paras = [p for p in text.split("\n\n") if p[:1].isupper() and not p.startswith(("Question", "Answer"))]
    for i, p in enumerate(paras):
        out.append(Prompt(f"prose-{i}", "prose", prompt=" ".join(p.split()[:6])))
    return out


def pytest_addoption(parser):
    parser.addoption("--served", action="store_true", help="run the served dflash A/B (two vLLM servers, ~10 min)")


def pytest_configure(config):
    config.addinivalue_line("markers", "served: starts vLLM servers (opt-in with --served)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--served"):
        skip = pytest.mark.skip(reason="served A/B starts two vLLM servers; run with --served")
        for item in items:
            if "served" in item.keywords:
                item.add_marker(skip)


def round_robin(prompts: list[Prompt]) -> list[Prompt]:
    """Interleave sources: the i-th prompt of every source before any source's (i+1)-th."""
    rank: dict[str, int] = {}
    keyed = []
    for p in prompts:
        rank[p.source] = rank.get(p.source, -1) + 1
        keyed.append((rank[p.source], p.source, p))
    return [p for *_, p in sorted(keyed, key=lambda k: k[:2])]


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
    return tiny_prompts()
