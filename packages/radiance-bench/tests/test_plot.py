"""The performance plot: decode as speed against cuBLAS bf16 in the same run, prefill as TF/s."""

import json

import matplotlib

from radiance_bench.kernelbench import plot

matplotlib.use("Agg")


def test_plot_from_runs(tmp_path, monkeypatch):
    ceil = {"copy_TBps": 2.0, "read_TBps": 4.0, "bf16_TFLOPs": 800.0, "fp8_TFLOPs": 1500.0}
    decode = [{"section": "decode", "kernel": k, "proj": p, "M": 8, "best_us": us}
              for p in ("q", "o") for k, us in (("w4a8 rot+gemm int4", 10.0), ("cuBLAS bf16", 30.0))]
    decode.append({"section": "decode", "kernel": "w4a8 gemm only int4", "proj": "x", "M": 8, "best_us": 5.0})
    prefill = [{"section": "prefill", "kernel": "_scaled_mm fp8", "proj": "q", "M": 2048, "TFLOPs": 1400.0},
               {"section": "prefill", "kernel": "w4a8 gemm int4 e4m3 token", "proj": "q", "M": 2048, "error": "x"}]
    paths = []
    for name, rows in (("d", decode), ("p", prefill)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps({"meta": {}, "ceilings": ceil, "results": rows}))
    seen = {}
    real = plot._bars

    def spy(ax, rows, section, M, kernels, value, *rest):
        seen[section] = {(r["proj"], r["kernel"]): value(r) for r in rows if r["section"] == section}
        return real(ax, rows, section, M, kernels, value, *rest)

    monkeypatch.setattr(plot, "_bars", spy)
    out = tmp_path / "perf.png"
    plot.main([str(out), *map(str, paths)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert seen["decode"][("q", "w4a8 rot+gemm int4")] == 3.0 and seen["decode"][("q", "cuBLAS bf16")] == 1.0
    assert seen["decode"][("x", "w4a8 gemm only int4")] == 0.0  # no cuBLAS row in that run: no ratio
    assert ("q", "w4a8 gemm int4 e4m3 token") not in seen["prefill"]  # error rows are dropped
