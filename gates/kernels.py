"""Kernel and format gates: the radiance-kernels test suite, one row per op family.

The suite is the gate: every Triton kernel against its torch reference (byte-exact for codecs,
producers and prologues; the bf16 output floor for GEMMs), under the interpreter on CPU at small shapes,
and at the 27B-class shapes when run on a GPU with ``RADIANCE_FULL_SHAPES=1``. Rows count the tests that
ran; a family whose tests all skipped, or that has any failure, fails its row.

The suite starts in the background when the gates start (:func:`start`), in its own process with one thread (the
Triton interpreter's numpy work is serial; a second torch thread would only wait on a core the other gates hold),
and its rows come last, once the served gates have run beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from gates.core import Row

SUITE = Path(__file__).resolve().parents[1] / "packages" / "radiance-kernels" / "tests"

#: test file -> what its row stands for
FAMILIES = {
    "test_e4m3.py": "e4m3 codec: Triton == reference, hw cast, round trip",
    "test_mx.py": "e2m1 + e8m0 (MX) formats vs torch dtypes, round trips",
    "test_awq.py": "AWQ int4 / int5 bit-plane packing round trips",
    "test_rotation.py": "rotation records: Givens == dense fp64 (≤ 1e-12)",
    "test_rotate_quant.py": "rotate_quant: Triton == reference, bytes",
    "test_stream.py": "stream producers: fused == unfused chain, bytes",
    "test_w4a8_gemm.py": "w4a8_gemm int4/int5: Triton vs reference, bf16 floor",
    "test_mxfp4_gemm.py": "mxfp4_gemm: Triton vs reference, bf16 floor",
    "test_skinny_gemm.py": "skinny_gemm: Triton vs fp32 reference",
    "test_gdn.py": "gdn: chunk/recurrent vs fp64, span-200+ gates finite",
    "test_manifest.py": "manifest and backends: missing op / backend raise",
    "test_tuned.py": "per-GPU tuned tile tables: lookup, stale names fail",
    "test_programmatic_launch.py": "programmatic launch: switch scoped; PDL chain == plain launches (GPU)",
    "test_arrivals.py": "split-K arrival counters: one zeroed buffer per op, device, stream",
}


def start(ctx) -> tuple[subprocess.Popen, Path, Path]:
    """Launch the suite once (a pytest process writing a JUnit report); :func:`gates` waits for it."""

    def launch():
        xml, log = ctx.workdir / "kernels-junit.xml", ctx.workdir / "kernels-pytest.log"
        with log.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
                                     f"--junitxml={xml}"], stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "OMP_NUM_THREADS": "1"})
        ctx.on_close(proc.kill)
        return proc, xml, log

    return ctx.cached("kernels:suite", launch)


def _suite(ctx) -> list[Row]:
    proc, xml, log = start(ctx)
    proc.wait()
    if not xml.exists():
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}): {tail}")
    report = ET.parse(xml).getroot()
    per_row = sum(float(s.get("time", 0)) for s in report.iter("testsuite")) / len(FAMILIES)
    counts: dict[str, Counter] = {}
    for case in report.iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + ".py"
        c = counts.setdefault(name, Counter())
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        c[outcome] += 1
    rows = []
    for name, what in FAMILIES.items():
        c = counts.get(name, Counter())
        bad = c["failure"] + c["error"]
        figure = f"{c['passed']} passed, {bad} failed"
        if c["skipped"]:
            figure += f", {c['skipped']} skipped (GPU shapes)"
        rows.append(Row(f"kernels: {what}", figure, "all ran pass", c["passed"] > 0 and bad == 0, per_row))
    unlisted = sorted(set(counts) - set(FAMILIES))
    if unlisted:
        rows.append(Row("kernels: every test file has a gate row", f"unlisted: {unlisted}", "none", False))
    return rows


def gates(ctx):
    yield "kernels suite", lambda: _suite(ctx)
