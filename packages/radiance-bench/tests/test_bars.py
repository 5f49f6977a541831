"""Issue-6 bar rows from a kernelbench run: ratios within one run, met flags, shortfall factors."""

import json

import pytest

from radiance_bench.kernelbench import bars

CEIL = {"copy_TBps": 2.0, "read_TBps": 4.0, "bf16_TFLOPs": 800.0, "fp8_TFLOPs": 1500.0}


def run(rows):
    return {"meta": {"gpu": "Test GPU"}, "ceilings": CEIL, "results": rows}


def test_rows_and_shortfalls():
    rows = [
        {"section": "decode", "kernel": "w4a8 rot+gemm int4", "proj": "q", "M": 8, "best_us": 10.0, "weight_TBps": 1.0},
        {"section": "decode", "kernel": "cuBLAS bf16", "proj": "q", "M": 8, "best_us": 40.0},
        {"section": "decode", "kernel": "GemLite A16W4", "proj": "q", "M": 8, "best_us": 20.0},
        {"section": "decode", "kernel": "w4a8 rot+gemm int4", "proj": "o", "M": 8, "error": "boom"},
        {"section": "prefill_variants", "kernel": "w4a8 gemm int4 k32", "proj": "q", "M": 2048,
         "frac_fp8_ceiling": 0.1},
        {"section": "prefill_variants", "kernel": "w4a8 gemm int4 k64", "proj": "q", "M": 2048,
         "frac_fp8_ceiling": 0.15},
        {"section": "prefill_variants", "kernel": "w4a8 gemm int4 deq", "proj": "q", "M": 2048,
         "act": "int8 group ZPE", "frac_fp8_ceiling": 0.3},
        {"section": "prefill_variants", "kernel": "w4a8 gemm int4 k64", "proj": "q", "M": 2048,
         "act": "int8 group ZPE", "frac_fp8_ceiling": 0.2},
        {"section": "producer_variants", "kernel": "rotate_quant e4m3 group bm16w4", "M": 8192, "P": 1,
         "frac_copy": 0.35},
        {"section": "producer_variants", "kernel": "rotate_quant e4m3 group bm8w4", "M": 8192, "P": 1,
         "frac_copy": 0.8},
        {"section": "stack", "kernel": "64-layer served int4", "M": 8, "vs_limit": 2.5, "best_us": 10.0},
        {"section": "stack", "kernel": "64-layer cuBLAS bf16 + plain producers", "M": 8, "vs_limit": 1.1,
         "best_us": 12.0},
        # ablation rows (the same launches without PDL) explain, they are not bars
        {"section": "stack", "kernel": "64-layer served int4 no-PDL", "M": 8, "vs_limit": 1.0, "best_us": 4.0,
         "ablation": "no PDL"},
        {"section": "decode", "kernel": "w4a8 rot+gemm no-PDL int4", "proj": "q", "M": 8, "best_us": 1.0,
         "weight_TBps": 10.0, "ablation": "no PDL"},
    ]
    out = {r["item"]: r for r in bars.check(run(rows), "x.json")}
    dec = out["q M=8 w4a8 rot+gemm int4 vs cuBLAS bf16"]
    assert dec["measured"] == 4.0 and dec["met"] and dec["short_by"] == 1.0
    stream = out["q M=8 w4a8 rot+gemm int4, fraction of copy"]
    assert stream["measured"] == 0.5 and not stream["met"] and stream["short_by"] == pytest.approx(1.8)
    assert out["q M=8 w4a8 rot+gemm int4 vs GemLite A16W4"]["measured"] == 2.0
    peer = out["q M=8 w4a8 rot+gemm int4 faster than cuBLAS bf16"]  # cuBLAS is also a peer (bar 1.0)
    assert peer["bar"] == "peer" and peer["measured"] == 4.0 and peer["met"]
    pre = sorted((r for r in out.values() if r["bar"] == "prefill"), key=lambda r: r["measured"])
    assert [r["measured"] for r in pre] == [0.15, 0.3]  # best per activation format (rows without one: old runs)
    assert "k64)" in pre[0]["item"] and "deq, int8 group ZPE" in pre[1]["item"]
    prod = [r for r in out.values() if r["bar"] == "producer"]
    assert len(prod) == 1 and prod[0]["met"] and "bm8w4" in prod[0]["item"]
    stack = out["64-layer served int4 M=8, × weight-stream limit"]
    assert not stack["met"] and stack["short_by"] == 2.0 and stack["at_most"]
    assert sum(r["bar"] == "stack" for r in out.values()) == 1  # the bf16 stack is the served one's peer
    assert out["64-layer served int4 M=8 vs 64-layer cuBLAS bf16 + plain producers"]["measured"] == 1.2
    assert not any("o M=8" in item for item in out)  # failed rows give no bar
    assert not any("no-PDL" in item for item in out)


def test_stack_pairs_each_width_with_its_own_bf16_pass():
    """``--bits 4 5`` records a bf16 stack per weight width, after that width's rows: each served stack is compared
    with its own pass's, and no bf16 stack counts as a stack bar of ours."""
    rows = [{"section": "stack", "kernel": "64-layer served int4", "M": 8, "vs_limit": 2.3, "best_us": 7.0},
            {"section": "stack", "kernel": "64-layer cuBLAS bf16 + plain producers", "M": 8, "vs_limit": 1.2,
             "best_us": 14.0},
            {"section": "stack", "kernel": "64-layer served int5", "M": 8, "vs_limit": 2.2, "best_us": 8.0},
            {"section": "stack", "kernel": "64-layer cuBLAS bf16 + plain producers", "M": 8, "vs_limit": 1.2,
             "best_us": 12.0}]
    out = bars.check(run(rows), "x.json")
    assert [r["item"] for r in out if r["bar"] == "stack"] == ["64-layer served int4 M=8, × weight-stream limit",
                                                               "64-layer served int5 M=8, × weight-stream limit"]
    assert [r["measured"] for r in out if r["bar"] == "peer"] == [2.0, 1.5]


def test_stack_against_the_copy_limit_too():
    """A stack row with its weight bytes also gets the issue's literal limit, weight bytes / copy bandwidth, as a bar
    of its own beside the stricter one (the faster of copy and read); rows without weight bytes (older runs) only
    the stricter."""
    rows = [{"section": "stack", "kernel": "64-layer served int4", "M": 8, "vs_limit": 2.0, "best_us": 10.0,
             "weight_bytes": 16e6},  # copy 2 TB/s: 8 us; read 4 TB/s: 4 us (vs_limit as the bench wrote it)
            {"section": "stack", "kernel": "64-layer served int5", "M": 8, "vs_limit": 2.0, "best_us": 10.0}]
    out = bars.check(run(rows), "x.json")
    strict = [r for r in out if r["bar"] == "stack"]
    loose = [r for r in out if r["bar"] == "stack (copy BW)"]
    assert [r["measured"] for r in strict] == [2.0, 2.0] and not any(r["met"] for r in strict)
    assert len(loose) == 1 and loose[0]["measured"] == pytest.approx(1.25) and loose[0]["met"]
    assert loose[0]["item"] == "64-layer served int4 M=8, × weight bytes / copy bandwidth"


def test_skinny_rows_pair_by_width():
    """in_proj_ba at TP = 1 and 2 (N = 96, 48): each skinny row against cuBLAS at its own N and M."""
    rows = [{"section": "skinny", "kernel": k, "M": 8, "N": n, "best_us": t}
            for n, k, t in ((96, "skinny_gemm", 5.0), (96, "cuBLAS bf16", 6.0), (48, "skinny_gemm", 6.0),
                            (48, "cuBLAS bf16", 5.4))]
    out = {r["item"]: r for r in bars.check(run(rows), "x.json")}
    assert out["in_proj_ba N=96 M=8 skinny_gemm vs cuBLAS bf16"]["measured"] == pytest.approx(1.2)
    assert not out["in_proj_ba N=48 M=8 skinny_gemm vs cuBLAS bf16"]["met"]


def test_cli_writes_summary(tmp_path):
    src = tmp_path / "kb.json"
    src.write_text(json.dumps(run([{"section": "stack", "kernel": "s", "M": 8, "vs_limit": 1.2}])))
    out = tmp_path / "bars.json"
    assert bars.main([str(out), str(src)]) == 0
    data = json.loads(out.read_text())
    assert data["summary"] == {"stack": {"rows": 1, "met": 1}}
