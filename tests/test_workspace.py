"""Workspace invariants that no single package can test."""

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def test_internal_dependencies_are_exact_pins():
    versions = {name: _project(ROOT / "packages" / name)["version"] for name in PACKAGES}
    for name in PACKAGES:
        for dep in _project(ROOT / "packages" / name).get("dependencies", []):
            m = re.match(r"(radiance-[a-z]+)(\[[^\]]*\])?(.*)", dep)
            if m:
                assert m.group(3) == f"=={versions[m.group(1)]}", f"{name} must pin {m.group(1)} exactly: {dep!r}"


def test_lock_has_no_machine_paths():
    text = (ROOT / "uv.lock").read_text()
    for needle in ("/root/", "/home/", "/opt/", "/tmp/", "/work/", "file://"):
        assert needle not in text, f"uv.lock contains a machine path ({needle})"


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_version_skew_fails_to_lock(tmp_path):
    """Bump radiance-kernels without its dependants: `uv sync` must refuse, naming the skew."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "uv.lock", tmp_path / "uv.lock")
    for name in PACKAGES:
        dst = tmp_path / "packages" / name
        (dst / "src").mkdir(parents=True)
        shutil.copy(ROOT / "packages" / name / "pyproject.toml", dst / "pyproject.toml")
        shutil.copy(ROOT / "packages" / name / "README.md", dst / "README.md")
        shutil.copytree(ROOT / "packages" / name / "src", dst / "src", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    k = tmp_path / "packages" / "radiance-kernels" / "pyproject.toml"
    k.write_text(k.read_text().replace('version = "0.1.0"', 'version = "0.1.1"', 1))
    shutil.copytree(ROOT / "tools", tmp_path / "tools")
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")}
    # uv ignores versions in requirements on workspace members, so the lock itself goes through ...
    subprocess.run(["uv", "lock"], cwd=tmp_path, check=True, capture_output=True, timeout=600, env=env)
    # ... and the shared build hook makes the sync refuse.
    res = subprocess.run(["uv", "sync", "--package", "radiance-kernels", "--no-dev"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode != 0, "a skewed radiance-kernels version synced without error"
    assert "radiance-quant requires 'radiance-kernels==0.1.0' but the workspace has radiance-kernels 0.1.1" \
        in res.stderr, res.stderr


def test_ci_runs_every_package_suite_once():
    """`.ci/run` runs each package's tests session, except radiance-kernels', whose suite the gates run (every test
    file a row of gates/kernels.py): no suite is left out and none runs twice."""
    ci = (ROOT / ".ci" / "run").read_text()
    sessions = set(re.findall(r"tests\(package='([\w-]+)'\)", ci))
    assert "nox -s gates" in ci
    assert sessions == set(PACKAGES) - {"radiance-kernels"}, sessions
    gated = re.search(r'SUITE = .*"packages" / "([\w-]+)" / "tests"', (ROOT / "gates" / "kernels.py").read_text())
    assert gated and gated.group(1) == "radiance-kernels"
