"""What a checkpoint directory stores: the safetensors headers, and a few named tensors by memory map."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def resolve_model_dir(model: str) -> Path:
    """A local model directory, or the cached snapshot of a hub id (no download)."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, local_files_only=True))


def tensor_headers(model_dir: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{tensor name: (safetensors dtype, shape)} over every ``*.safetensors`` file in ``model_dir``."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files")
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name != "__metadata__":
                out[name] = (meta["dtype"], tuple(meta["shape"]))
    return out


def load_tensors(model_dir: Path, names: set[str]) -> dict:
    """The named tensors (those present), read through safetensors' memory map."""
    from safetensors import safe_open

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(f, framework="pt") as fh:
            for name in names.intersection(fh.keys()):
                out[name] = fh.get_tensor(name)
    return out


def modules_with(headers: dict[str, tuple[str, tuple[int, ...]]], suffix: str) -> frozenset[str]:
    """Module names that store a tensor called ``suffix`` (e.g. ``qweight``)."""
    tail = "." + suffix
    return frozenset(name[: -len(tail)] for name in headers if name.endswith(tail))
