"""The JSON result every command writes: kind, full configuration, summary, per-item records.

Layout: ``{"kind", "schema", "config": {url, model, seed, temperature, concurrency, ..., date,
versions, server}, "summary": {...}, "client": {requests, retries, errors}, <command data>}``.
Writes are atomic (temp file in the same directory, then rename).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path

SCHEMA = 1


def versions() -> dict[str, str]:
    """Versions of this client's stack (the server's own version goes in ``config.server``)."""
    out = {"python": platform.python_version()}
    for dist in ("radiance-bench", "httpx", "numpy", "scipy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def envelope(kind: str, config: dict, summary: dict, client: dict | None = None, **data) -> dict:
    """A result document; ``config`` gains date and versions."""
    cfg = dict(config)
    cfg.setdefault("date", now_utc())
    cfg.setdefault("versions", versions())
    return {"kind": kind, "schema": SCHEMA, "config": cfg, "summary": summary, "client": client or {}, **data}


def write_json(obj: dict, path: str | Path) -> Path:
    """Write ``obj`` to ``path`` atomically (temp + rename); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=False, allow_nan=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | Path) -> dict:
    """Read a result, checking it is one (kind, schema, config)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON result ({exc})") from exc
    missing = [k for k in ("kind", "schema", "config", "summary") if k not in obj]
    if missing:
        raise ValueError(f"{path}: not a radiance-bench result (missing {', '.join(missing)})")
    if obj["schema"] != SCHEMA:
        raise ValueError(f"{path}: result schema {obj['schema']}, this radiance-bench reads {SCHEMA}")
    return obj


def default_path(kind: str, model: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(model).name or "model")
    return Path("results") / f"{kind}-{safe}-{stamp}.json"
