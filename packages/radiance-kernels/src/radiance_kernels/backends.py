"""Explicit kernel backends.

Every op is called with ``backend="reference"`` (plain torch, any device: the numerical spec) or
``backend="triton"`` (Triton kernels: a CUDA/ROCm GPU, or the CPU interpreter when
``TRITON_INTERPRET=1``). Asking for a backend that cannot run raises :class:`BackendUnavailableError`;
nothing ever switches backend silently.
"""

from __future__ import annotations

import contextlib
import os

import torch

BACKENDS = ("reference", "triton")


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run the op on the given tensors."""


def triton_interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def triton_unavailable_reason(device: torch.device) -> str | None:
    """Why Triton cannot run on ``device``; None when it can."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:  # pragma: no cover - triton is a declared dependency on linux
        return f"triton is not importable ({exc})"
    if triton_interpreted():
        if device.type != "cpu":
            return f"TRITON_INTERPRET=1 runs kernels on CPU tensors, got a {device.type} tensor"
        return None
    if device.type != "cuda":
        return (
            f"triton needs a CUDA/ROCm GPU tensor (got {device.type}); "
            "set TRITON_INTERPRET=1 to run the Triton kernels on CPU"
        )
    if not torch.cuda.is_available():
        return "torch.cuda is not available"
    return None


def check_backend(backend: str, device: torch.device, op: str) -> None:
    """Raise unless ``backend`` can run ``op`` on ``device``."""
    if backend not in BACKENDS:
        raise BackendUnavailableError(f"{op}: unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "triton":
        reason = triton_unavailable_reason(device)
        if reason is not None:
            raise BackendUnavailableError(f"{op}: backend 'triton' unavailable: {reason}")


def available_backends(device: torch.device | str = "cpu") -> tuple[str, ...]:
    """The backends that can run on ``device`` in this process."""
    device = torch.device(device)
    return tuple(b for b in BACKENDS if b == "reference" or triton_unavailable_reason(device) is None)


_PROGRAMMATIC = [True]


def set_programmatic_launch(on: bool) -> bool:
    """Chain launches by programmatic dependent launch from now on (``on``) or not; returns the previous setting.
    Where it holds, the decode GEMM lets the next launch start after its loop, and it and the producers are launched
    as dependents that wait (``griddepcontrol.wait``) before touching memory. A launch-time choice: a CUDA graph keeps
    the edges of its capture. On by default (the vLLM plugin's ``RADIANCE_PDL``)."""
    prev = _PROGRAMMATIC[0]
    _PROGRAMMATIC[0] = bool(on)
    return prev


@contextlib.contextmanager
def programmatic_launch(on: bool):
    """:func:`set_programmatic_launch` within the block (the bench's no-PDL rows), restored after it."""
    prev = set_programmatic_launch(on)
    try:
        yield
    finally:
        set_programmatic_launch(prev)


def programmatic_launch_on(device: torch.device | str) -> bool:
    """Whether launches on ``device`` chain by programmatic dependent launch now: the switch is on
    (:func:`set_programmatic_launch`) and ``device`` is an NVIDIA GPU of compute capability 9.0 or newer outside the
    interpreter (elsewhere ``griddepcontrol`` does not exist and launches stay plain)."""
    device = torch.device(device)
    return (_PROGRAMMATIC[0] and device.type == "cuda" and not triton_interpreted() and torch.version.cuda is not None
            and torch.cuda.get_device_capability(device) >= (9, 0))
