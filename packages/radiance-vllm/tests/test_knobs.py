import pytest

from radiance_vllm.knobs import KNOBS, KnobError, Settings


def test_defaults_and_empty_is_unset():
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({"RADIANCE_PQ_ACT": "", "RADIANCE_PQ_ZPE": "  "}) == Settings()


def test_typed_values():
    s = Settings.from_env({"RADIANCE_PQ_ACT": "int8", "RADIANCE_PQ_ZPE": "1", "RADIANCE_CHECKALL_CHUNK": "64",
                           "RADIANCE_NVFP4_BF16_LAYERS": "in_proj_b, in_proj_a", "RADIANCE_PDL": "off"})
    assert (s.pq_act, s.pq_zpe, s.checkall_chunk, s.nvfp4_bf16_layers) == ("int8", True, 64, ("in_proj_a", "in_proj_b"))
    assert Settings().pdl and not s.pdl


@pytest.mark.parametrize("env", [{"RADIANCE_PQ_ACT": "fp8"}, {"RADIANCE_PQ_ZPE": "maybe"},
                                 {"RADIANCE_CHECKALL_CHUNK": "-3"}, {"RADIANCE_CHECKALL_TOL": "nan"}])
def test_bad_value_names_the_variable(env):
    with pytest.raises(KnobError, match=next(iter(env))):
        Settings.from_env(env)


def test_unknown_knob_raises():
    with pytest.raises(KnobError, match="RADIANCE_PQ_I8"):
        Settings.from_env({"RADIANCE_PQ_I8": "1"})


def test_compile_key_covers_exactly_the_compiled_knobs():
    for k in KNOBS:
        raw = {"checkall_tol": "0.5", "checkall_chunk": "7", "nvfp4_exp": "ocp", "nvfp4_bf16_layers": "x",
               "pq_decode_act": "int8"}.get(k.field)
        if raw is None:
            flip = "0" if k.default else "1"  # a bool knob set to what it is not by default
            raw = flip if isinstance(k.default, bool) else next(v for v in k.parse.allowed if v != k.default)
        needs = {"RADIANCE_STREAM": "1"} if k.field == "stream_defer" else {}  # it acts on the producers
        changed = Settings.from_env({**needs, k.env: raw}).compile_cache_key()
        assert (changed != Settings.from_env(needs).compile_cache_key()) == k.compiled, k.env


def test_stream_defer_needs_the_producers():
    """RADIANCE_STREAM_DEFER set without RADIANCE_STREAM=1 would act on nothing: it is named, not ignored."""
    with pytest.raises(KnobError, match="RADIANCE_STREAM_DEFER acts on the fused producers"):
        Settings.from_env({"RADIANCE_STREAM_DEFER": "0"})
    assert not Settings.from_env({"RADIANCE_STREAM": "1", "RADIANCE_STREAM_DEFER": "0"}).stream_defer
    assert Settings.from_env({"RADIANCE_STREAM": "1"}).stream_defer


def test_decode_act_must_change_something():
    """RADIANCE_PQ_DECODE_ACT naming RADIANCE_PQ_ACT's own element would act on nothing: refused, named."""
    for env in ({"RADIANCE_PQ_DECODE_ACT": "e4m3"}, {"RADIANCE_PQ_ACT": "int8", "RADIANCE_PQ_DECODE_ACT": "int8"}):
        with pytest.raises(KnobError, match="RADIANCE_PQ_DECODE_ACT=.* is RADIANCE_PQ_ACT's element"):
            Settings.from_env(env)
    s = Settings.from_env({"RADIANCE_PQ_ACT": "int8", "RADIANCE_PQ_DECODE_ACT": "e4m3"})
    assert (s.pq_act, s.pq_decode_act) == ("int8", "e4m3")
    assert Settings.from_env({"RADIANCE_PQ_DECODE_ACT": "same"}).pq_decode_act == "same"


def test_act_element_by_rows(monkeypatch):
    """The element of a call: RADIANCE_PQ_DECODE_ACT up to the decode band's last row count, RADIANCE_PQ_ACT past
    it and wherever the decode knob is unset."""
    from radiance_vllm import kernel_calls, knobs

    band = kernel_calls.DECODE_MAX_M
    monkeypatch.setattr(knobs, "_SETTINGS", Settings.from_env({"RADIANCE_PQ_DECODE_ACT": "int8"}))
    assert [kernel_calls.act_element(m) for m in (1, band, band + 1, 4096)] == ["int8", "int8", "e4m3", "e4m3"]
    monkeypatch.setattr(knobs, "_SETTINGS", Settings.from_env({"RADIANCE_PQ_ACT": "int8"}))
    assert {kernel_calls.act_element(m) for m in (1, band + 1)} == {"int8"}


def test_act_element_refuses_a_compiled_forward(monkeypatch):
    """Traced once for every batch size (vLLM drops the shape guards), a compiled forward would fix the per-call
    choice at the traced size: the trace fails naming the knob; unset, the element is a constant and compiles."""
    import torch

    from radiance_vllm import kernel_calls, knobs

    def forward(x):
        return x * (2 if kernel_calls.act_element(x.shape[0]) == "int8" else 3)

    monkeypatch.setattr(knobs, "_SETTINGS", Settings.from_env({"RADIANCE_PQ_DECODE_ACT": "int8"}))
    assert forward(torch.ones(4)).eq(2).all()
    torch._dynamo.reset()
    with pytest.raises(Exception, match="RADIANCE_PQ_DECODE_ACT"):
        torch.compile(forward, fullgraph=True, dynamic=True, backend="eager")(torch.ones(4))
    monkeypatch.setattr(knobs, "_SETTINGS", Settings())
    torch._dynamo.reset()
    assert torch.compile(forward, fullgraph=True, dynamic=True, backend="eager")(torch.ones(4)).eq(3).all()


def test_as_env_round_trips():
    s = Settings.from_env({"RADIANCE_PQ_SCALES": "token", "RADIANCE_STREAM": "1"})
    assert s.as_env() == {"RADIANCE_PQ_SCALES": "token", "RADIANCE_STREAM": "1"}
    assert Settings.from_env(s.as_env()) == s
