"""Hatch build hook shared by every workspace package: refuse to build on internal version skew.

uv resolves workspace members from their sources and ignores the version in an internal pin, so
``radiance-quant`` pinning ``radiance-kernels==0.1.0`` would still lock and sync against a bumped
0.1.1. This hook restores the guarantee: whenever any member is built (``uv sync`` builds editables,
``uv build`` wheels) it reads every member's ``pyproject.toml`` and fails unless each internal
dependency is pinned with ``==`` to that member's current version.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_INTERNAL = re.compile(r"^(radiance-[a-z]+)(\[[^\]]*\])?\s*(.*)$")


def skew(packages_dir: Path) -> list[str]:
    """Every internal requirement that is not ``==`` the member's version, as messages."""
    projects = {}
    for pyproject in sorted(packages_dir.glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        projects[project["name"]] = project
    problems = []
    for name, project in projects.items():
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        for req in reqs:
            m = _INTERNAL.match(req.strip())
            if not m or m.group(1) not in projects:
                continue
            want = f"=={projects[m.group(1)]['version']}"
            if m.group(3).replace(" ", "") != want:
                problems.append(f"{name} requires {req!r} but the workspace has {m.group(1)} {want[2:]}")
    return problems


class PinCheckHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        packages_dir = Path(self.root).parent
        if not (packages_dir.parent / "pyproject.toml").exists():
            return  # built outside the workspace (e.g. from an unpacked wheel build dir)
        problems = skew(packages_dir)
        if problems:
            raise RuntimeError("internal version skew: " + "; ".join(problems)
                               + ". Bump the dependants' exact pins together with the version.")
