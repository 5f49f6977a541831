"""The ``radiance-drafter`` CLI: split, init, export and the promote rule's refusal, end to end."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from radiance_drafter.cli import app
from radiance_drafter.config import DrafterConfig
from radiance_drafter.prompts import load_prompts, write_prompts

runner = CliRunner()


def _ok(args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r.output


def test_split_init_export(tmp_path, tiny_target, prompts):
    write_prompts(tmp_path / "all.jsonl", prompts)
    _ok(["split", tmp_path / "all.jsonl", "--heldout", 9, "--train-out", tmp_path / "tr.jsonl",
         "--heldout-out", tmp_path / "ho.jsonl"])
    held = load_prompts(tmp_path / "ho.jsonl")
    assert sorted({p.source for p in held}) == ["arithmetic", "code", "prose"] and len(held) == 9
    assert len(load_prompts(tmp_path / "tr.jsonl")) == len(prompts) - 9
    _ok(["init", tiny_target, tmp_path / "d", "--layers", 2, "--taps", 2, "--mask-token-id", 0, "--kv-heads", 4])
    cfg = DrafterConfig.load(tmp_path / "d")
    assert cfg.target_layer_ids == (0, 1) and cfg.num_hidden_layers == 2 and cfg.num_draft_tokens == 7
    for fmt in ("bf16", "fp8"):
        _ok(["export", tmp_path / "d", tmp_path / fmt, "--format", fmt])
        assert (tmp_path / fmt / "model.safetensors").exists()
    args = _ok(["capture-server-args", tiny_target, "--drafter", tmp_path / "d", "--storage", tmp_path / "hs"])
    assert '"eagle_aux_hidden_state_layer_ids":[1,2]' in args and "HostHiddenStatesConnector" in args


def test_compare_refuses_below_min_tokens(tmp_path):
    def result(v):
        return {"kind": "served", "sampling": {}, "prompt_ids": ["a"], "completion_tokens": 1200,
                "acc_per_draft": v, "per_source": {"chat": {"acc_per_draft": v, "completion_tokens": 1200}}}

    (tmp_path / "a.json").write_text(json.dumps(result(2.0)))
    (tmp_path / "b.json").write_text(json.dumps(result(3.0)))
    out = _ok(["compare", tmp_path / "a.json", tmp_path / "b.json", "--out", tmp_path / "v.json"])
    assert "refused" in out and json.loads((tmp_path / "v.json").read_text())["verdict"] == "refused"
    _ok(["compare", tmp_path / "a.json", tmp_path / "b.json", "--min-tokens", 1000, "--out", tmp_path / "v.json"])
    assert json.loads((tmp_path / "v.json").read_text())["verdict"] == "promote"
