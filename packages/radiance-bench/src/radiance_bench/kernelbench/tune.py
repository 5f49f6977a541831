"""``python -m radiance_bench.kernelbench.tune OUT.json kb-decode_variants.json [kb-prefill_variants.json ...]``:
the per-GPU tuned-config table (:mod:`radiance_kernels.ops.w4a8_gemm.tuned`) from A/B bench results.

For every (band, N, K, M, activation element, weight bits, deferred) measured, the config with the best time wins
(``decode_pairs`` rows: the GEMM timed with the producer that reads its output — their winners become the table's
``defer`` entries; where that section's reference row, the reduced pick summing its splits in the kernel, wins, the
entry is marked ``reduced``), each
config timed by the *last* input file that measured it there (inputs in measurement order: a later run times the current
kernel, so its figure replaces an earlier one of code since changed, while configs it did not time keep theirs;
ablation and failed rows, and configs no longer defined, are skipped; the element is the first word of a row's
``act`` label, e4m3 where a row predates the field); each measured M of a shape serves the M above the previous
measured one up to itself (``M_max``); larger M than any measured run the band's default. The table names the GPU
and the source files; it is written atomically. Put it at ``radiance_kernels/ops/w4a8_gemm/tuned/<gpu_key>.json`` to
make serving use it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import defaultdict
from pathlib import Path

from radiance_kernels.ops.w4a8_gemm.triton import DECODE, PREFILL
from radiance_kernels.ops.w4a8_gemm.tuned import gpu_key

SECTIONS = {"decode_variants": "decode", "decode_pairs": "decode", "prefill_variants": "prefill"}
KERNEL = re.compile(r"w4a8 gemm int([45]) (\S+)$")  # (bits, config name)


def build(runs: list[dict], sources: list[str]) -> dict:
    """The table from bench JSONs (``{"meta": {"gpu"}, "results": [...]}``) of one GPU."""
    gpus = {r["meta"]["gpu"] for r in runs}
    if len(gpus) != 1:
        raise ValueError(f"tune: results come from several GPUs {sorted(gpus)}; tune one GPU at a time")
    latest: dict[tuple, float] = {}  # (key, config) -> the last run's best time
    for run in runs:
        this: dict[tuple, float] = {}
        for row in run["results"]:
            band = SECTIONS.get(row.get("section"))
            name = KERNEL.match(row["kernel"])
            if band is None or "error" in row or row.get("ablation") or name is None or ":" in name[2]:
                continue
            if name[2] not in (DECODE if band == "decode" else PREFILL):  # a config since removed
                continue
            act = row.get("act", "e4m3").split()[0]
            pair = row["section"] == "decode_pairs"  # (its reference rows before session 15: "defer" False)
            key = (band, row["N"], row["K"], act, int(name[1]), pair, row["M"])
            cand = (name[2], pair and row.get("reduced", not row["defer"]))
            this[key, cand] = min(this.get((key, cand), row["best_us"]), row["best_us"])
        latest |= this
    best: dict[tuple, tuple[float, tuple[str, bool]]] = {}
    for (key, cand), us in latest.items():
        best[key] = min(best.get(key, (us, cand)), (us, cand))
    if not best:
        raise ValueError(f"tune: no {' / '.join(SECTIONS)} rows in the inputs")
    shapes: dict[tuple, list] = defaultdict(list)
    for (band, N, K, act, bits, defer, M), (_, cand) in sorted(best.items()):
        shapes[band, N, K, act, bits, defer].append((M, *cand))
    table: dict = {"gpu": gpus.pop(), "source": sources, "w4a8_gemm": defaultdict(list)}
    for (band, N, K, act, bits, defer), points in shapes.items():
        for M, name, reduced in points:
            table["w4a8_gemm"][band].append({"N": N, "K": K, "act": act, "bits": bits, "M_max": M, "config": name,
                                             **({"defer": True} if defer else {}),
                                             **({"reduced": True} if reduced else {})})
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("results", nargs="+", type=Path)
    args = ap.parse_args(argv)
    table = build([json.loads(p.read_text()) for p in args.results], [os.path.relpath(p) for p in args.results])
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, args.out)
    n = sum(len(v) for v in table["w4a8_gemm"].values())
    print(f"{args.out}: {n} entries for {table['gpu']} (file name should be {gpu_key(table['gpu'])}.json)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
