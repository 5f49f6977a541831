import shutil

import pytest

from radiance_quant import build, tiny


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    """Untrained tiny Qwen3 (fp32), shared read-only."""
    return tiny.build_tiny_qwen3(tmp_path_factory.mktemp("base") / "m", seed=0, train_steps=0)


@pytest.fixture(scope="session")
def int4(base, tmp_path_factory):
    """Tiny ParoQuant int4 checkpoint with random rotations, shared read-only."""
    out = tmp_path_factory.mktemp("int4") / "m"
    build.build(base, out, "int4", seed=0)
    return out


@pytest.fixture(scope="session")
def small_int4(tmp_path_factory):
    """One-layer synthetic bf16 model (7 linears) as ParoQuant int4: the cheap target of bad-input tests."""
    d = tmp_path_factory.mktemp("small")
    base = tiny.build_synthetic(d / "base", layers=1, hidden=128, intermediate=256, shards=1)
    build.build(base, d / "int4", "int4", seed=0)
    return d / "int4"


@pytest.fixture
def int4_copy(small_int4, tmp_path):
    """A private copy of the small int4 checkpoint, to corrupt."""
    return shutil.copytree(small_int4, tmp_path / "int4")


def pytest_addoption(parser):
    parser.addoption(
        "--external",
        action="store_true",
        help="also run the checks against z-lab paroquant and llm-compressor (builds a throwaway venv)",
    )
