"""Streaming checkpoint I/O: a memory-mapped reader over (sharded) HF safetensors directories and a
resumable, atomic writer that emits one shard per unit (a transformer layer, or "other").

Reader: headers are parsed up front (a shard shorter than its header says is reported as truncated,
naming the file and the first tensor past the end); tensors are read one at a time through
`safe_open` (mmap, opened per tensor so no shard stays mapped), so memory holds one tensor plus what the
caller keeps.

Writer (`Job`): the output directory holds `.radiance-job.json` = {fingerprint, units, done}. Each
unit's shard is written to a temp file, fsynced and renamed, then recorded (sha256) in the state file
(itself written by temp + rename). A rerun with the same fingerprint skips recorded units whose file
still hashes to the recorded digest; a directory holding anything else is refused untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

STATE = ".radiance-job.json"
REPORT = "radiance-quant-report.json"
INDEX = "model.safetensors.index.json"
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_LAYER = re.compile(r"\.layers\.(\d+)\.")


class CheckpointError(ValueError):
    """Bad input or output state; the message names the file and tensor."""


def _header(path: Path) -> dict:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated shard ({size} bytes, no safetensors header)")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise CheckpointError(f"{path}: truncated shard (header of {n} bytes, file {size} bytes)")
        try:
            header = json.loads(fh.read(n))
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from None
    header.pop("__metadata__", None)
    for name, meta in header.items():
        if 8 + n + meta["data_offsets"][1] > size:
            raise CheckpointError(
                f"{path}: truncated shard: tensor {name} ends at byte {8 + n + meta['data_offsets'][1]}, "
                f"file has {size}"
            )
        if meta["dtype"] not in DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unsupported dtype {meta['dtype']}")
    return header


class Checkpoint:
    """A HF checkpoint directory: config.json + model.safetensors or sharded files with an index."""

    def __init__(self, path: str | Path):
        self.dir = Path(path)
        cfg = self.dir / "config.json"
        if not cfg.is_file():
            raise CheckpointError(f"{self.dir}: no config.json")
        self.config = json.loads(cfg.read_text())
        index = self.dir / INDEX
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in self.dir.glob("*.safetensors"))
            weight_map = None
        if not files:
            raise CheckpointError(f"{self.dir}: no *.safetensors files")
        self._where: dict[str, str] = {}
        self._meta: dict[str, dict] = {}
        self._heads: dict[str, bytes] = {}
        for f in files:
            p = self.dir / f
            if not p.is_file():
                raise CheckpointError(f"{p}: shard listed in {INDEX} is missing")
            for name, meta in _header(p).items():
                self._where[name], self._meta[name] = f, meta
        if weight_map is not None:
            for name, f in weight_map.items():
                if self._where.get(name) != f:
                    raise CheckpointError(f"{self.dir / f}: tensor {name} listed in {INDEX} is not in that shard")

    def names(self) -> list[str]:
        return sorted(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> Path:
        return self.dir / self._where[name]

    def spec(self, name: str) -> tuple[torch.dtype, tuple[int, ...]]:
        """(dtype, shape) from the header, without reading data."""
        self._require(name)
        m = self._meta[name]
        return DTYPES[m["dtype"]], tuple(m["shape"])

    def _require(self, name: str) -> None:
        if name not in self._where:
            raise CheckpointError(f"{self.dir}: missing tensor {name}")

    def check(self, name: str, dtype: torch.dtype | None = None, shape: tuple[int, ...] | None = None) -> None:
        """Raise naming file + tensor unless it exists with the expected dtype/shape (header only)."""
        dt, sh = self.spec(name)
        if (dtype is not None and dt != dtype) or (shape is not None and tuple(shape) != sh):
            raise CheckpointError(
                f"{self.file_of(name)}: tensor {name}: expected {dtype or dt} {list(shape or sh)}, got {dt} {list(sh)}"
            )

    def get(self, name: str, dtype: torch.dtype | None = None, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Read one tensor (memory-mapped), after checking dtype/shape against the header."""
        self.check(name, dtype, shape)
        f = self._where[name]
        try:  # opened per tensor: the shard's mapped pages are released with the handle, RSS stays ~1 tensor
            with safe_open(self.dir / f, framework="pt") as fh:
                return fh.get_tensor(name)
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"{self.dir / f}: tensor {name}: {e}") from e

    def fingerprint(self) -> str:
        """sha256 over config.json and every shard's name, size and header (no tensor data)."""
        h = hashlib.sha256((self.dir / "config.json").read_bytes())
        for f in sorted(set(self._where.values())):
            p = self.dir / f
            with open(p, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                h.update(f.encode() + str(p.stat().st_size).encode() + fh.read(n))
        return h.hexdigest()


def unit_of(name: str) -> str:
    """Resume unit of a tensor: "layers.N" for transformer layer N, else "other"."""
    m = _LAYER.search(name)
    return f"layers.{int(m.group(1))}" if m else "other"


def units(names: list[str]) -> dict[str, list[str]]:
    """Tensor names grouped by unit, "other" first then layers in numeric order."""
    out: dict[str, list[str]] = {}
    for n in sorted(names):
        out.setdefault(unit_of(n), []).append(n)
    return dict(
        sorted(out.items(), key=lambda kv: (kv[0] != "other", int(kv[0].split(".")[1]) if kv[0] != "other" else 0))
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write bytes via a temp file in the same directory + fsync + rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: object) -> None:
    write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


class Job:
    """Resumable output directory with one shard per unit (see module docstring)."""

    def __init__(self, out_dir: str | Path, fingerprint: dict, unit_names: list[str]):
        self.dir = Path(out_dir)
        self.fingerprint = fingerprint
        self.unit_names = list(unit_names)
        n = len(self.unit_names)
        self.files = {u: f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i, u in enumerate(self.unit_names)}
        state_path = self.dir / STATE
        if state_path.is_file():
            state = json.loads(state_path.read_text())
            if state.get("fingerprint") != fingerprint or state.get("units") != self.unit_names:
                diff = sorted(
                    k
                    for k in set(fingerprint) | set(state.get("fingerprint", {}))
                    if state.get("fingerprint", {}).get(k) != fingerprint.get(k)
                )
                raise CheckpointError(
                    f"{self.dir}: holds the output of a different job or model (differs in: {diff or ['units']}); "
                    "nothing was overwritten — choose an empty directory"
                )
            self.done = state["done"]
        elif self.dir.exists() and any(not p.name.startswith(".") for p in self.dir.iterdir()):
            raise CheckpointError(f"{self.dir}: not empty and not a radiance-quant output; nothing was overwritten")
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.done = {}
            self._save_state()

    def _save_state(self) -> None:
        write_json(self.dir / STATE, {"fingerprint": self.fingerprint, "units": self.unit_names, "done": self.done})

    def is_done(self, unit: str) -> bool:
        rec = self.done.get(unit)
        path = self.dir / self.files[unit]
        return rec is not None and path.is_file() and _sha256(path) == rec["sha256"]

    def pending(self) -> Iterator[str]:
        """Units still to write (drops records whose shard is missing or altered)."""
        for u in self.unit_names:
            if not self.is_done(u):
                self.done.pop(u, None)
                yield u

    def write(self, unit: str, tensors: dict[str, torch.Tensor]) -> None:
        """Write a unit's shard atomically and record it."""
        path = self.dir / self.files[unit]
        tmp = path.with_name(f".{path.name}.tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={"format": "pt"})
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        self.done[unit] = {"sha256": _sha256(path), "tensors": sorted(tensors)}
        self._save_state()

    def finish(self, config: dict, source: Path, report: dict) -> None:
        """Write the index, config.json, the small non-weight files of `source` and the JSON report."""
        missing = [u for u in self.unit_names if u not in self.done]
        if missing:
            raise CheckpointError(f"{self.dir}: units not written: {missing}")
        weight_map = {t: self.files[u] for u in self.unit_names for t in self.done[u]["tensors"]}
        total = sum((self.dir / f).stat().st_size for f in self.files.values())
        write_json(
            self.dir / INDEX, {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        )
        for p in sorted(source.iterdir()):
            if (
                p.is_file()
                and not p.name.startswith(".")
                and p.suffix != ".safetensors"
                and p.name
                not in (
                    "config.json",
                    INDEX,
                    REPORT,
                )
            ):
                tmp = self.dir / f".{p.name}.tmp"
                shutil.copyfile(p, tmp)
                os.replace(tmp, self.dir / p.name)
        write_json(self.dir / "config.json", config)
        write_json(self.dir / REPORT, report)


def run_units(job: Job, plan: dict[str, list[str]], convert, desc: str) -> list[str]:
    """Write every pending unit: `convert(unit, names) -> {name: tensor}`; returns the units written."""
    from tqdm import tqdm

    todo = list(job.pending())
    for u in tqdm(todo, desc=desc, unit="unit", disable=None):
        job.write(u, convert(u, plan[u]))
    return todo
