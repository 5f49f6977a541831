"""The tuned-table builder: best config per (band, shape, M), M ranges, one GPU only."""

import json
import os

import pytest

from radiance_bench.kernelbench import tune


def row(section, name, M, us, **extra):
    return {"section": section, "kernel": f"w4a8 gemm int4 {name}", "N": 256, "K": 512, "M": M, "best_us": us,
            **extra}


def run(rows, gpu="Test GPU 9"):
    return {"meta": {"gpu": gpu}, "results": rows}


def test_best_config_per_measured_m():
    rows = [row("decode_variants", "nib8", 1, 5.0), row("decode_variants", "nib8x", 1, 6.0),
            row("decode_variants", "nib8", 8, 9.0), row("decode_variants", "nib8x", 8, 7.0),
            row("decode_variants", "nib8x", 8, 1.0, ablation="nodot"),
            row("decode_variants", "fused", 8, 0.5, error="boom"),
            row("prefill_variants", "k64", 2048, 100.0), row("prefill_variants", "k32", 2048, 130.0),
            row("prefill_variants", "deq", 2048, 90.0, act="e4m3 group"),
            row("prefill_variants", "k32", 2048, 50.0, act="int8 group ZPE")]  # int8: its own entry
    table = tune.build([run(rows)], ["x.json"])
    assert table["gpu"] == "Test GPU 9"
    e4 = {"N": 256, "K": 512, "act": "e4m3", "bits": 4}
    assert table["w4a8_gemm"]["decode"] == [{**e4, "M_max": 1, "config": "nib8"}, {**e4, "M_max": 8, "config": "nib8x"}]
    assert table["w4a8_gemm"]["prefill"] == [{**e4, "M_max": 2048, "config": "deq"},
                                             {**e4, "act": "int8", "M_max": 2048, "config": "k32"}]


def test_activation_element_and_bits_are_separate_keys():
    """int8 / int5 rows of the same shape and M get their own entries (their winners differ)."""
    rows = [row("decode_variants", "nib8", 8, 9.0), row("decode_variants", "gemv", 8, 4.0, act="int8 group"),
            row("decode_variants", "nib8x", 8, 8.0, act="int8 group"),
            {**row("decode_variants", "nib8p", 8, 11.0), "kernel": "w4a8 gemm int5 nib8p"}]
    got = {(e["act"], e["bits"]): e["config"] for e in tune.build([run(rows)], [])["w4a8_gemm"]["decode"]}
    assert got == {("e4m3", 4): "nib8", ("int8", 4): "gemv", ("e4m3", 5): "nib8p"}


def test_a_later_run_replaces_an_earlier_figure_per_config():
    """A config timed again takes the later run's figure, even where the earlier one was faster (it belongs to code
    since changed); configs and keys the later run did not time keep theirs."""
    early = run([row("decode_variants", "nib8", 1, 3.0), row("decode_variants", "gemv", 1, 4.0),
                 row("decode_variants", "nib8x", 1, 4.5), row("decode_variants", "nib8", 8, 9.0)])
    late = run([row("decode_variants", "nib8", 1, 6.0), row("decode_variants", "gemv", 1, 5.0)])
    got = {e["M_max"]: e["config"] for e in tune.build([early, late], [])["w4a8_gemm"]["decode"]}
    assert got == {1: "nib8x", 8: "nib8"}


def test_configs_since_removed_are_skipped():
    """A config an old run timed that no longer exists cannot win (its name would not load)."""
    rows = [row("decode_variants", "nib8", 1, 5.0), row("decode_variants", "mma2_o4", 1, 1.0),
            row("prefill_variants", "k64w", 2048, 1.0), row("prefill_variants", "k64", 2048, 100.0)]
    table = tune.build([run(rows)], [])["w4a8_gemm"]
    assert [e["config"] for e in table["decode"] + table["prefill"]] == ["nib8", "k64"]


def test_refuses_mixed_gpus_and_empty_input(tmp_path):
    with pytest.raises(ValueError, match="several GPUs"):
        tune.build([run([row("decode_variants", "nib8", 1, 5.0)]), run([], gpu="Other")], [])
    with pytest.raises(ValueError, match="no decode_variants"):
        tune.build([run([])], [])


def test_cli_writes_atomically(tmp_path):
    src = tmp_path / "kb.json"
    src.write_text(json.dumps(run([row("decode_variants", "nib8", 1, 5.0)])))
    out = tmp_path / "test-gpu-9.json"
    assert tune.main([str(out), str(src)]) == 0
    assert json.loads(out.read_text())["source"] == [os.path.relpath(src)]
    assert not out.with_suffix(".tmp").exists()


def test_variant_filter_names_unknown_configs():
    from radiance_bench.kernelbench.variants import pick

    configs = {"a": 1, "b": 2, "c": 3}
    assert pick(configs, None) is configs
    assert pick(configs, ["c", "a"]) == {"a": 1, "c": 3}
    with pytest.raises(ValueError, match="unknown configs"):
        pick(configs, ["a", "zz"])


def test_prefill_variant_rows_per_format(monkeypatch):
    """prefill_variants (GPU parts faked): every config in each activation format, int5 only for
    PREFILL_INT5, ZPE with int8; ``act`` on every row; ``rel_vs_first`` within one format and width."""
    from types import SimpleNamespace

    import torch

    from radiance_bench.kernelbench import variants
    from radiance_bench.kernelbench.timing import Timing

    def gemm(elem, w, bounds, zpe, band, cfg):
        assert zpe == (elem == "int8") and band == "prefill"
        return torch.full((2, 2), {"e4m3": 1.0, "int8": 2.0}[elem] + 4.0 * (w.bits == 5))

    monkeypatch.setattr(variants, "projections", lambda tp: [SimpleNamespace(name="mlp.down", N=256, K=512)])
    monkeypatch.setattr(variants, "activations", lambda M, K, seed: None)
    monkeypatch.setattr(variants, "w4_weight", lambda proj, bits, seed: SimpleNamespace(
        w=SimpleNamespace(bits=bits), bounds=[0, 256], nbytes=1))
    monkeypatch.setattr(variants, "rotate_quant", lambda x, wt, elem, gran: (elem,))
    monkeypatch.setattr(variants, "graph_time", lambda calls, min_calls: Timing(1.0, 1.0, 1))
    monkeypatch.setattr(variants.w4, "gemm", gemm)
    rows = []
    variants.prefill_variants(lambda section, kernel, t, **f: rows.append({"kernel": kernel, **f}), rows,
                              {"fp8_TFLOPs": 1000.0}, names=["k64", "deq", "deq64"])
    got = sorted((r["act"], r["kernel"]) for r in rows)
    assert got == sorted((act, f"w4a8 gemm int{b} {n}") for act in ("e4m3 group", "int8 group ZPE")
                         for b, names in ((4, ("k64", "deq", "deq64")), (5, ("k64", "deq"))) for n in names)
    assert all("error" not in r and r["rel_vs_first"] == 0.0 for r in rows)


def test_deferred_pairs_become_defer_entries():
    """decode_pairs rows compete among themselves for the ``defer`` entry — deferred ones and the reduced reference
    (marked ``reduced`` where it wins; a row of the same config deferred is another candidate) —, decode_variants
    rows for the reduced entry."""
    rows = [row("decode_variants", "nib8", 8, 9.0), row("decode_variants", "nib8x", 8, 9.5),
            row("decode_pairs", "nib8", 8, 8.0, defer=True), row("decode_pairs", "nib8x", 8, 7.0, defer=True),
            row("decode_pairs", "nib8x", 16, 5.0, defer=True), row("decode_pairs", "nib8x", 16, 6.0, defer=False),
            row("decode_pairs", "nib8", 1, 4.0, defer=True), row("decode_pairs", "nib8x", 1, 3.0, defer=False,
                                                                   reduced=True),
            row("decode_pairs", "nib8x", 1, 3.5, defer=True)]
    e4 = {"N": 256, "K": 512, "act": "e4m3", "bits": 4}
    assert tune.build([run(rows)], [])["w4a8_gemm"]["decode"] == [
        {**e4, "M_max": 8, "config": "nib8"},
        {**e4, "M_max": 1, "config": "nib8x", "defer": True, "reduced": True},
        {**e4, "M_max": 8, "config": "nib8x", "defer": True}, {**e4, "M_max": 16, "config": "nib8x", "defer": True}]


def test_old_pair_reference_rows_count_reduced():
    """A decode_pairs reference row from before the ``reduced`` field (``defer`` False: the reduced pick, its bf16
    output read by the producer) is the reduced candidate."""
    rows = [row("decode_pairs", "gemv_o16", 1, 2.0, defer=False), row("decode_pairs", "nib8x", 1, 3.0, defer=True)]
    e4 = {"N": 256, "K": 512, "act": "e4m3", "bits": 4, "M_max": 1}
    assert tune.build([run(rows)], [])["w4a8_gemm"]["decode"] == [
        {**e4, "config": "gemv_o16", "defer": True, "reduced": True}]


def test_decode_pair_rows(monkeypatch):
    """decode_pairs (GPU parts faked): per pair, M and activation element the reduced pick (the band's default where
    the table has none) once reduced, then it and each ring config of that element's operand kind deferred;
    ``rel_vs_reduced`` reads the partials as the producer does (their sum), so equal products give 0."""
    from types import SimpleNamespace

    import torch

    from radiance_bench.kernelbench import pairs
    from radiance_bench.kernelbench.timing import Timing

    def gemm(A, AS, RS, w, bounds, zpe, band, cfg, defer, reduced):
        assert defer  # the partials form, always: the reference row hands its in-kernel sum as the one partial
        out = torch.full((2, 1, 4), 0.5)  # two splits: their sum 1.0, the reduced output
        return out.sum(0, keepdim=True) if reduced else out

    monkeypatch.setattr(pairs, "projections", lambda tp: [SimpleNamespace(name=n, N=256, K=512)
                                                          for n in ("attn.o_proj", "mlp.gate_up", "mlp.down")])
    monkeypatch.setattr(pairs, "activations", lambda M, K, seed: None)
    monkeypatch.setattr(pairs, "w4_weight", lambda proj, bits, seed: SimpleNamespace(
        w=SimpleNamespace(bits=bits), bounds=[0, 256], nbytes=1 << 30))
    monkeypatch.setattr(pairs, "rotate_quant", lambda x, wt, elem: (elem, None, None))
    monkeypatch.setattr(pairs, "consumer", lambda producer, M, K, p_next, elem: lambda y: y)
    monkeypatch.setattr(pairs, "graph_time", lambda calls: Timing(1.0, 1.0, 1))
    monkeypatch.setattr(pairs.torch.cuda, "get_device_name", lambda: "Test GPU 9")
    monkeypatch.setattr(pairs.tuned, "pick", lambda *a: "gemv_o16" if a[6] == "int8" else None)
    monkeypatch.setattr(pairs.w4, "gemm", gemm)
    rows = []
    pairs.decode_pairs(lambda section, kernel, t, **f: rows.append({"kernel": kernel, **f}), rows, ms=(8,),
                       names=["mma2t2s", "mma8t2s"])
    got = [(r["proj"], r["act"], r["kernel"].split()[-1], r["defer"], r["reduced"]) for r in rows
           if r["proj"] == "mlp.down"]
    down = lambda act, name, defer: ("mlp.down", f"{act} group", name, defer, not defer)  # noqa: E731
    assert got == [down("e4m3", "nib8xpr", False), down("e4m3", "nib8xpr", True), down("e4m3", "mma2t2s", True),
                   down("int8", "gemv_o16", False), down("int8", "gemv_o16", True), down("int8", "mma8t2s", True)]
    assert len(rows) == 18 and all("error" not in r and r["rel_vs_reduced"] == 0.0 for r in rows)


def test_prefill_shapes_cover_every_served_gemm_shape():
    """The prefill table can key every (N, K) a W4A8 GEMM serves at TP = 1: the A/B times one projection of each
    (in_proj_ba's N = 96 is the skinny GEMM's, not the W4A8 GEMM's)."""
    from radiance_bench.kernelbench import variants
    from radiance_kernels.shapes import projections

    served = {(p.N, p.K) for p in projections(1) if p.name != "gdn.in_proj_ba"}
    timed = [(p.N, p.K) for p in projections(1) if p.name in variants.PREFILL_SHAPES]
    assert sorted(timed) == sorted(served)
