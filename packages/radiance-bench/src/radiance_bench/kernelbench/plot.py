"""``python -m radiance_bench.kernelbench.plot OUT.png kb-*.json``: decode weight-stream rates and prefill
TF/s of Radiance's kernels beside the peers and ceilings measured in the same run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _rows(paths: list[str]) -> tuple[list[dict], dict]:
    rows, ceil = [], {}
    for p in paths:
        run = json.loads(Path(p).read_text())
        rows += [r for r in run["results"] if "error" not in r]
        ceil = run["ceilings"]
    return rows, ceil


def _bars(ax, rows, section, M, kernels, value, ylabel, title):
    projs = sorted({r["proj"] for r in rows if r["section"] == section and r.get("M") == M},
                   key=lambda p: [r["proj"] for r in rows].index(p))
    width = 0.8 / len(kernels)
    for i, k in enumerate(kernels):
        ys = [next((value(r) for r in rows if r["section"] == section and r.get("M") == M and r["proj"] == p
                    and r["kernel"] == k), 0.0) for p in projs]
        ax.bar([j + i * width for j in range(len(projs))], ys, width, label=k if k[0] != "_" else "torch." + k)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(projs))], projs, rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)


def main(argv: list[str]) -> None:
    out, paths = argv[0], argv[1:]
    rows, ceil = _rows(paths)
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5))
    cublas = {r["proj"]: r["best_us"] for r in rows if r["section"] == "decode" and r.get("M") == 8
              and r["kernel"] == "cuBLAS bf16"}
    _bars(a, rows, "decode", 8, ["w4a8 rot+gemm int4", "w4a8 rot+gemm int4 int8-group", "w4a8 gemm only int4",
                                 "GemLite A16W4"],
          lambda r: cublas[r["proj"]] / r["best_us"] if r["proj"] in cublas else 0.0, "speed vs cuBLAS bf16 (x)",
          "Decode M=8: cuBLAS bf16 time / kernel time (higher is better)")
    a.axhline(1.0, color="k", ls="-", lw=1, label="cuBLAS bf16")
    a.axhline(3.4, color="k", ls="--", lw=1, label="issue 6 bar (3.4x)")
    a.legend(fontsize=8, loc="upper left", ncols=2)
    a.set_ylim(0, 4.2)
    _bars(b, rows, "prefill", 2048, ["_scaled_mm fp8", "w4a8 gemm int4 int8 group ZPE", "w4a8 gemm int4 e4m3 token",
                                     "GemLite A8W4", "cuBLAS bf16"],
          lambda r: r.get("TFLOPs", 0.0), "TF/s", "Prefill M=2048: TF/s (higher is better)")
    b.legend(fontsize=8, loc="upper left", ncols=2)
    b.set_ylim(top=b.get_ylim()[1] * 1.25)
    fig.suptitle("Radiance kernels vs peers, NVIDIA H200, each panel one run (CUDA graphs, DRAM-fed)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])
