"""``python -m gates.run [--only AREA ...] [--json PATH]``: run the gates, print the table, exit 1 on FAIL."""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

from gates.core import Context, render, timed_rows, write_json

#: Gate modules in run order (cheap, local gates first, then the served end-to-end gates). An area with a ``start(ctx)``
#: is started before any gate runs and works in the background until its own rows are due: the kernel suite, whose
#: rows come last.
AREAS = ["formats", "serve", "serve_quant", "bench", "drafter", "kernels"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", default=None, help="areas to run (default: all)")
    ap.add_argument("--json", type=Path, default=Path("results/gates.json"))
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    areas = args.only or AREAS
    rows = []
    with tempfile.TemporaryDirectory(prefix="radiance-gates-") as tmp:
        ctx = Context(workdir=args.workdir or Path(tmp))
        try:
            modules = [importlib.import_module(f"gates.{area}") for area in areas]
            for mod in modules:
                if hasattr(mod, "start"):
                    mod.start(ctx)
            for mod in modules:
                for name, fn in mod.gates(ctx):
                    rows += timed_rows(name, fn)
                    print(render(rows[-1:]).splitlines()[2], flush=True)
        finally:
            ctx.close()
    print()
    print(render(rows))
    write_json(rows, args.json)
    return 0 if rows and all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
