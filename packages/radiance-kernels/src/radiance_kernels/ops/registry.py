"""Op registry: one entry per op family, with its version and one implementation per backend.

Each ``ops/<op>/__init__.py`` calls :func:`register_op` once and exposes a ``torch.library.custom_op``
(``radiance::<op>``) whose ``backend`` argument is dispatched through :func:`implementation`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from radiance_kernels.backends import check_backend


@dataclass(frozen=True)
class OpSpec:
    name: str
    version: int
    impls: dict[str, Callable] = field(default_factory=dict)


_OPS: dict[str, OpSpec] = {}


def register_op(name: str, version: int, **impls: Callable) -> OpSpec:
    """Register ``name`` at ``version`` with ``reference=`` and optionally ``triton=`` implementations."""
    if "reference" not in impls:
        raise ValueError(f"op {name!r} must have a reference implementation")
    if name in _OPS and _OPS[name].version != version:
        raise ValueError(f"op {name!r} registered twice with versions {_OPS[name].version} and {version}")
    spec = OpSpec(name, version, dict(impls))
    _OPS[name] = spec
    return spec


def registered_ops() -> dict[str, OpSpec]:
    return dict(_OPS)


def implementation(name: str, backend: str, device: torch.device) -> Callable:
    """The ``backend`` implementation of ``name``; raises when it is missing or cannot run on ``device``."""
    check_backend(backend, device, name)
    impl = _OPS[name].impls.get(backend)
    if impl is None:
        from radiance_kernels.backends import BackendUnavailableError

        raise BackendUnavailableError(f"{name}: no {backend!r} implementation")
    return impl
