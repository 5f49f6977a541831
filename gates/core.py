"""Gate rows, the context shared by gate modules, and the table/JSON report."""

from __future__ import annotations

import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Row:
    gate: str
    figure: str
    bar: str
    passed: bool
    seconds: float = 0.0

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"


def fmt(x: float) -> str:
    """A figure for the table: short, with an exponent where it helps."""
    if x == 0 or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.2e}"


@dataclass
class Context:
    """What gate modules share: a scratch dir and lazily built, cached fixtures."""

    workdir: Path
    _cache: dict = field(default_factory=dict)
    _cleanups: list = field(default_factory=list)

    def cached(self, key: str, build: Callable[[], object]):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def release(self, key: str) -> None:
        """Drop a cached fixture now, stopping it if it is a server (frees memory for later areas)."""
        obj = self._cache.pop(key, None)
        if obj is not None and hasattr(obj, "stop"):
            obj.stop()

    def on_close(self, fn: Callable[[], None]) -> None:
        self._cleanups.append(fn)

    def close(self) -> None:
        while self._cleanups:
            self._cleanups.pop()()


def timed_rows(name: str, fn: Callable[[], list[Row]]) -> list[Row]:
    """Run one gate function; an exception becomes a FAIL row naming it (the run goes on)."""
    t0 = time.perf_counter()
    try:
        rows = list(fn())
    except Exception as exc:  # noqa: BLE001 - a gate that crashes is a FAIL, reported, not hidden
        traceback.print_exc()
        last = (str(exc).strip().splitlines() or [""])[-1]
        rows = [Row(name, f"error: {type(exc).__name__}: {last}"[:160], "runs", False)]
    dt = (time.perf_counter() - t0) / max(len(rows), 1)
    for r in rows:
        r.seconds = r.seconds or dt
    return rows


def render(rows: list[Row]) -> str:
    headers = ("gate", "figure", "bar", "status", "s")
    table = [(r.gate, r.figure, r.bar, r.status, f"{r.seconds:.1f}") for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)) for t in table]
    n_fail = sum(not r.passed for r in rows)
    out.append(f"{len(rows) - n_fail} passed, {n_fail} failed")
    return "\n".join(out)


def write_json(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(r) | {"status": r.status} for r in rows], indent=2))
    tmp.replace(path)
