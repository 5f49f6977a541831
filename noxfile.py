"""Radiance sessions. ``uv sync`` first, then ``uv run nox -s gates`` (main job) / ``uv run nox -s tests``.

Every session's environment is made by ``uv sync --frozen`` from the committed ``uv.lock`` into the
session's own venv, so tests see exactly the locked versions and nothing they did not declare:
``tests(package=...)`` holds only that package, its declared dependencies and its ``test`` group.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]

#: package -> extra ``uv sync`` arguments (radiance-vllm takes vLLM's CPU build on our machines).
PACKAGES = {
    "radiance-kernels": [],
    "radiance-quant": [],
    "radiance-vllm": ["--extra", "cpu"],
    "radiance-drafter": [],
    "radiance-bench": [],
}


def _sync(session: nox.Session, *args: str) -> None:
    """Install from the lock into this session's venv (never touches the dev .venv)."""
    session.run_install("uv", "sync", "--frozen", "--inexact", *args,
                        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location}, external=True)


def _pytest(session: nox.Session, *paths: str) -> None:
    session.run("python", "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider",
                "--timeout", os.environ.get("RADIANCE_TEST_TIMEOUT", "1800"), *session.posargs)


@nox.session
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests in an environment holding only that package and its dependencies."""
    _sync(session, "--package", package, "--group", "test", *PACKAGES[package])
    _pytest(session, f"packages/{package}/tests")


@nox.session
def workspace(session: nox.Session) -> None:
    """Workspace invariants: exact internal pins make a version skew fail to lock; wheels build."""
    _sync(session, "--only-group", "dev")
    _pytest(session, "tests")


@nox.session
def producers(session: nox.Session) -> None:
    """radiance-quant against the real producers (z-lab paroquant, llm-compressor), each installed from
    PyPI into a throwaway venv by the tests (they pin compressed-tensors apart from vLLM's)."""
    _sync(session, "--package", "radiance-quant", "--group", "test")
    _pytest(session, "packages/radiance-quant/tests/test_external.py", "--external")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff at the locked version (the dev group), over the whole workspace."""
    _sync(session, "--only-group", "dev")
    session.run("ruff", "check", ".")


@nox.session
def wheels(session: nox.Session) -> None:
    """Build each package's wheel on its own; install radiance-kernels' wheel alone and import it."""
    dist = os.path.join(session.create_tmp(), "dist")
    for package in PACKAGES:
        session.run("uv", "build", "--package", package, "--wheel", "-o", dist, external=True)
    session.install("--find-links", dist, "radiance-kernels==0.1.0")
    session.run("python", "-c", "import radiance_kernels as k; print('radiance-kernels', k.__version__, k.manifest())")


@nox.session
def gates(session: nox.Session) -> None:
    """The main job: format, kernel, checkpoint and served end-to-end gates on tiny models; one table."""
    _sync(session, "--all-packages")
    session.run("python", "-m", "gates.run", *session.posargs)
