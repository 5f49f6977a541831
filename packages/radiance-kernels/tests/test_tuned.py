"""Per-GPU tuned tile tables: lookup by shape and M range, validation of the names they hold."""

import json

import pytest

from radiance_kernels.ops.w4a8_gemm import tuned


@pytest.fixture
def tables(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "TABLES", tmp_path)
    tuned.table.cache_clear()
    yield tmp_path
    tuned.table.cache_clear()


def write(tables, entries, band="decode"):
    (tables / "test-gpu-9.json").write_text(json.dumps({"gpu": "Test GPU 9", "source": [],
                                                        "w4a8_gemm": {band: entries}}))


def test_pick_by_shape_and_m_range(tables):
    write(tables, [{"N": 256, "K": 512, "M_max": None, "config": "nib8w"},
                   {"N": 256, "K": 512, "M_max": 1, "config": "nib8"},
                   {"N": 256, "K": 512, "M_max": 8, "config": "fused"}])
    assert tuned.gpu_key("Test GPU 9") == "test-gpu-9"
    picks = [tuned.pick("Test GPU 9", "w4a8_gemm", "decode", M, 256, 512) for M in (1, 2, 8, 9, 64)]
    assert picks == ["nib8", "fused", "fused", "nib8w", "nib8w"]
    assert tuned.pick("Test GPU 9", "w4a8_gemm", "decode", 1, 256, 1024) is None  # other shape
    assert tuned.pick("Test GPU 9", "w4a8_gemm", "prefill", 4096, 256, 512) is None  # other band
    assert tuned.pick("Test GPU 9", "mxfp4_gemm", "decode", 1, 256, 512) is None  # other op
    with pytest.warns(UserWarning, match="no tuned table for 'Other GPU'"):  # no table: the defaults, said once
        assert tuned.pick("Other GPU", "w4a8_gemm", "decode", 1, 256, 512) is None


def test_pick_by_activation_element_and_bits(tables):
    """Entries without act / bits are e4m3 int4 (the first tables); int8 / int5 look up their own."""
    write(tables, [{"N": 256, "K": 512, "M_max": None, "config": "nib8w"},
                   {"N": 256, "K": 512, "M_max": None, "config": "gemv", "act": "int8", "bits": 4},
                   {"N": 256, "K": 512, "M_max": None, "config": "nib8p", "act": "e4m3", "bits": 5}])
    pick = lambda act, bits: tuned.pick("Test GPU 9", "w4a8_gemm", "decode", 8, 256, 512, act, bits)  # noqa: E731
    assert (pick("e4m3", 4), pick("int8", 4), pick("e4m3", 5), pick("int8", 5)) == ("nib8w", "gemv", "nib8p", None)


def test_deferred_entries_serve_the_partials_form_only(tables):
    """``defer`` entries (timed with the producer reading the partials) win for the deferred form; the reduced form
    never sees them; a deferred lookup that no deferred entry covers takes the reduced entries."""
    write(tables, [{"N": 256, "K": 512, "M_max": 8, "config": "nib8w"},
                   {"N": 256, "K": 512, "M_max": None, "config": "nib8p"},
                   {"N": 256, "K": 512, "M_max": 8, "config": "fused", "defer": True},
                   {"N": 128, "K": 512, "M_max": None, "config": "nib8"}])
    pick = lambda M, N, defer: tuned.pick("Test GPU 9", "w4a8_gemm", "decode", M, N, 512, defer=defer)  # noqa: E731
    assert [pick(M, 256, False) for M in (1, 16)] == ["nib8w", "nib8p"]
    assert [pick(M, 256, True) for M in (1, 8, 16)] == ["fused", "fused", "nib8p"]
    assert (pick(1, 128, True), pick(1, 128, False)) == ("nib8", "nib8")


def test_reduced_marks_a_deferred_entry(tables):
    """A ``defer`` entry marked ``reduced`` (its pair ran faster with the GEMM reducing) comes with its entry; the
    mark is refused on a reduced entry."""
    write(tables, [{"N": 256, "K": 512, "M_max": 1, "config": "gemv", "defer": True, "reduced": True},
                   {"N": 256, "K": 512, "M_max": None, "config": "nib8p", "defer": True}])
    entry = lambda M: tuned.entry("Test GPU 9", "w4a8_gemm", "decode", M, 256, 512, defer=True)  # noqa: E731
    assert (entry(1)["config"], entry(1).get("reduced"), entry(8).get("reduced")) == ("gemv", True, None)
    assert tuned.entry("Test GPU 9", "w4a8_gemm", "decode", 1, 256, 512) is None  # the reduced form: no entry
    tuned.table.cache_clear()
    write(tables, [{"N": 256, "K": 512, "M_max": None, "config": "nib8p", "reduced": True}])
    with pytest.raises(ValueError, match="reduced"):
        tuned.pick("Test GPU 9", "w4a8_gemm", "decode", 1, 256, 512)


@pytest.mark.parametrize("band,defer", [("prefill", True), ("decode", "yes")])
def test_defer_is_a_decode_flag(tables, band, defer):
    write(tables, [{"N": 256, "K": 512, "M_max": None, "config": "nib8" if band == "decode" else "k64",
                    "defer": defer}], band)
    with pytest.raises(ValueError, match="defer"):
        tuned.pick("Test GPU 9", "w4a8_gemm", band, 1, 256, 512)


def test_unknown_config_name_fails_loudly(tables):
    write(tables, [{"N": 256, "K": 512, "M_max": None, "config": "renamed"}])
    with pytest.raises(ValueError, match="renamed"):
        tuned.pick("Test GPU 9", "w4a8_gemm", "decode", 1, 256, 512)


def test_committed_tables_load():
    for path in tuned.TABLES.glob("*.json"):
        gpu = json.loads(path.read_text())["gpu"]
        assert tuned.gpu_key(gpu) == path.stem
        assert tuned.table(gpu)
