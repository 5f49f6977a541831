"""What each probe does with its rows: one JSON line per row as it is measured (a cut run keeps them in the log),
then all of them as ``$OUT/<name>.json`` and one readable line each."""

import json
import os


def record(rows: list[dict], row: dict) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


def save(name: str, rows: list[dict], line) -> None:
    """``rows`` to ``$OUT/<name>.json``, then ``line(row)`` for each."""
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(line(r))


class Roles:
    """A jitted kernel whose launches get ``kw`` over the launcher's own keywords."""

    def __init__(self, kernel, **kw):
        self.kernel, self.kw = kernel, kw

    def __getitem__(self, grid):
        run = self.kernel[grid]
        return lambda *a, **k: run(*a, **{**k, **self.kw})

    def __getattr__(self, name):
        return getattr(self.kernel, name)
