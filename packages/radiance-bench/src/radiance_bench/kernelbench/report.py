"""Readable tables from a kernelbench JSON (``python -m radiance_bench.kernelbench.report FILE``)."""

from __future__ import annotations

import json
import sys


def table(run: dict) -> str:
    c = run["ceilings"]
    m = run["meta"]
    out = [f"{m['gpu']}  torch {m['torch']}  triton {m['triton']}  {m['date']}",
           f"ceilings: copy {c['copy_TBps']:.2f} TB/s, read {c.get('read_TBps', 0):.2f} TB/s, "
           f"bf16 {c['bf16_TFLOPs']:.0f} TF/s, "
           f"fp8 {c['fp8_TFLOPs']:.0f} TF/s"]
    for r in run["results"]:
        if "error" in r:
            where = f"{r.get('kernel', '')} {r.get('proj', '')} M={r.get('M', '')}"
            out.append(f"[{r['section']}] {where}: ERROR {r['error']}")
            continue
        head = f"[{r['section']}] {r['kernel']:<34} {r.get('proj', ''):<18} M={r.get('M', ''):<5}"
        tail = f"{r['best_us']:9.1f} us"
        if "frac_copy" in r:
            tail += f"  {r.get('weight_TBps', r.get('TBps', 0)):.2f} TB/s = {r['frac_copy']:.2f} of copy"
            if "frac_read" in r:
                tail += f", {r['frac_read']:.2f} of read"
        elif "TFLOPs" in r:
            tail += f"  {r['TFLOPs']:7.1f} TF/s"
            if r.get("vs_scaled_mm") is not None:
                tail += f" = {r['vs_scaled_mm']:.2f}x _scaled_mm"
            elif "weight_TBps" in r and r["section"] == "decode":
                tail += f"  {r['weight_TBps']:.2f} TB/s weights"
        if "vs_limit" in r:
            tail += f"  limit {r['limit_us']:.0f} us -> {r['vs_limit']:.2f}x"
        out.append(head + tail)
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(table(json.load(f)))
