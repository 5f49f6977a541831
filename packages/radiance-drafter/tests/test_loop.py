"""The gate on the tiny target: capture -> train -> held-out offline proxy above an untrained drafter;
the checkpoints load in vLLM's own dflash loader."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from radiance_drafter import tinyloop
from radiance_drafter.export import export
from radiance_drafter.vllm_check import check_vllm_load


@pytest.fixture(scope="module")
def loop(tiny_target, prompts, tmp_path_factory):
    work = tmp_path_factory.mktemp("loop")
    result = tinyloop.run(tiny_target, prompts, work)
    return work, result["train"], result["proxy"]


def test_trained_drafter_beats_untrained_on_heldout(loop):
    work, summary, proxies = loop
    for name, p in proxies.items():
        print(f"held-out proxy, {name}: {p['acc_per_draft']:.4f} accepted per draft (decode walk, {p['drafts']} "
              f"drafts), {p['acc_per_block']:.4f} per block (all {p['blocks']} anchors); per source "
              + ", ".join(f"{s} {x['acc_per_draft']:.3f}" for s, x in p["per_source"].items()))
    assert summary["finished"]
    assert set(proxies["trained"]["per_source"]) == {"arithmetic", "code", "prose"}
    for metric, bar in (("acc_per_draft", 0.2), ("acc_per_block", 0.5)):
        untrained, trained = proxies["untrained"][metric], proxies["trained"][metric]
        assert trained >= bar and trained >= 10 * max(untrained, 1e-3), (metric, untrained, trained)
    loss = json.loads((work / "run" / "loss.json").read_text())["loss"]
    assert sum(loss[-10:]) / 10 < sum(loss[:10]) / 10 - 1.0
    assert (work / "run" / "loss.png").exists()


def test_checkpoints_load_in_vllms_dflash_loader(loop, monkeypatch):
    work, _, _ = loop
    monkeypatch.setenv("VLLM_PLUGINS", "")  # the drafter needs no plugin; keep other packages' out

    target = json.loads((work / "run" / "settings.json").read_text())["target"]
    export(work / "run" / "drafter", work / "bf16", "bf16")
    for d in (work / "run" / "drafter", work / "bf16"):
        r = check_vllm_load(d, target)
        assert r["model_class"].endswith("qwen3_dflash.DFlashQwen3ForCausalLM")
        assert r["vllm_aux_layers"] == [1, 2]  # target_layer_ids (0, 1) -> vLLM taps the outputs of layers 0, 1
        assert r["checkpoint_tensors"] == 25
    with safe_open(str(work / "bf16" / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}  # noqa: SIM118


def test_fp8_export(loop, monkeypatch):
    """FP8 block-128 export: our layout, then vLLM's own fp8 parameters and weight loaders (kernels not built)
    with every weight dequantised by vLLM within one e4m3 rounding of the bf16 export; the full load (with
    kernels) needs AMX on a CPU: pinned to vLLM's refusal here, so a change shows up."""
    work, _, _ = loop
    monkeypatch.setenv("VLLM_PLUGINS", "")

    target = json.loads((work / "run" / "settings.json").read_text())["target"]
    export(work / "run" / "drafter", work / "fp8", "fp8")
    export(work / "run" / "drafter", work / "bf16", "bf16")
    cfg = json.loads((work / "fp8" / "config.json").read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128]
    with safe_open(str(work / "fp8" / "model.safetensors"), framework="pt") as f:
        t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    assert t["layers.0.self_attn.q_proj.weight"].dtype == torch.float8_e4m3fn
    assert t["layers.0.self_attn.q_proj.weight_scale_inv"].shape == (1, 1)
    assert t["fc.weight_scale_inv"].shape == (1, 2) and t["norm.weight"].dtype == torch.bfloat16
    r = check_vllm_load(work / "fp8", target, kernels=False, reference=work / "bf16")
    print({k: v for k, v in r.items() if k != "vllm_parameters"})
    assert r["model_class"].endswith("qwen3_dflash.DFlashQwen3ForCausalLM") and r["checkpoint_tensors"] == 40
    assert "model.layers.0.self_attn.qkv_proj.weight_scale_inv" in r["vllm_parameters"]
    # merged qkv / gate_up, o, down per layer, and fc: all FP8 in vLLM; the 10 norms bf16 and equal
    assert r["fp8_parameters_checked"] == 9 and r["equal_parameters_checked"] == 10
    if torch.cpu._is_amx_tile_supported():
        check_vllm_load(work / "fp8", target)
    else:
        with pytest.raises(ValueError, match="CPUFp8W8A8BlockScaledMMKernel requires AMX tile support"):
            check_vllm_load(work / "fp8", target)


def test_proxy_cli_applies_top_k_top_p(loop, tmp_path):
    """`proxy` with the verifier's top-k / top-p: top-k 1 at any temperature is greedy verification,
    so it must equal the T = 0 figures exactly; a nucleus run records its settings."""
    from typer.testing import CliRunner

    from radiance_drafter.cli import app

    work, _, _ = loop
    target = json.loads((work / "run" / "settings.json").read_text())["target"]
    base = [str(work / "run" / "drafter"), str(work / "cap-heldout"), target]
    runs = {}
    for name, extra in (("greedy", ["--temperature", "0"]), ("top1", ["--temperature", "1.0", "--top-k", "1"]),
                        ("nucleus", ["--temperature", "1.0", "--top-p", "0.9"])):
        out = tmp_path / f"{name}.json"
        r = CliRunner().invoke(app, ["proxy", *base, "--out", str(out), *extra])
        assert r.exit_code == 0, r.output
        runs[name] = json.loads(out.read_text())
    for key in ("acc_per_block", "acc_per_draft"):
        assert runs["top1"][key] == runs["greedy"][key]
    assert (runs["nucleus"]["top_p"], runs["nucleus"]["top_k"]) == (0.9, 0)
    assert 0 < runs["nucleus"]["acc_per_block"] <= runs["nucleus"]["draft_tokens"]
