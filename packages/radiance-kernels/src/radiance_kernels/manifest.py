"""The op manifest: which kernels this package provides, each with an integer version.

Consumers declare the ops they need and call :func:`require` at import time. A missing, renamed or
re-versioned op raises :class:`ImportError` naming the op, the required and the found version: never a
fallback. An op's version is bumped whenever its signature, layout or numerics change.
"""

from __future__ import annotations

from collections.abc import Mapping

from radiance_kernels.ops.registry import registered_ops


def manifest() -> dict[str, int]:
    """{op name: version} for every op registered in this package."""
    return {name: spec.version for name, spec in registered_ops().items()}


def require(consumer: str, ops: Mapping[str, int]) -> None:
    """Raise ImportError unless every op in ``ops`` is provided at exactly that version."""
    found = manifest()
    problems = []
    for name, version in sorted(ops.items()):
        have = found.get(name)
        if have != version:
            problems.append(
                f"op '{name}': required version {version}, found "
                + ("none (missing or renamed)" if have is None else f"version {have}")
            )
    if problems:
        from radiance_kernels import __version__

        raise ImportError(
            f"{consumer} cannot use radiance-kernels {__version__}: "
            + "; ".join(problems)
            + f". Provided ops: {sorted(found)}"
        )
