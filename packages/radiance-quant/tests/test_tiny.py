import hashlib
import json
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from radiance_quant import tiny
from radiance_quant.cli import app


def _hashes(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return tiny.build_tiny_qwen3(tmp_path_factory.mktemp("q3"), seed=0, train_steps=200)


def test_qwen3_bytes_deterministic(tmp_path):
    a = tiny.build_tiny_qwen3(tmp_path / "a", seed=1, train_steps=20)
    cmd = ["tiny", "--out", str(tmp_path / "b"), "--seed", "1", "--train-steps", "20"]
    subprocess.run([sys.executable, "-c", "from radiance_quant.cli import app; app()", *cmd], check=True)
    b = tmp_path / "b"
    c = tiny.build_tiny_qwen3(tmp_path / "c", seed=2, train_steps=20)
    assert _hashes(a) == _hashes(b)
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(_hashes(a))
    assert _hashes(a)["model.safetensors"] != _hashes(c)["model.safetensors"]


def test_qwen3_next_bytes_deterministic(tmp_path):
    a = tiny.build_tiny_qwen3_next(tmp_path / "a", seed=3)
    b = tiny.build_tiny_qwen3_next(tmp_path / "b", seed=3)
    assert _hashes(a) == _hashes(b)
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["layer_types"] == ["linear_attention", "full_attention"]
    assert cfg["linear_key_head_dim"] == cfg["linear_value_head_dim"] == 128
    assert cfg["dtype"] == "bfloat16" and cfg["num_experts"] == 4 and cfg["num_experts_per_tok"] == 2


def test_qwen3_next_dense_bytes_deterministic(tmp_path):
    """The GDN hybrid with dense MLPs: every layer but the last (vLLM's Qwen3-Next needs one MoE block) in
    mlp_only_layers; same seed, same bytes."""
    a = tiny.build_tiny_qwen3_next(tmp_path / "a", seed=3, dense=True)
    b = tiny.build_tiny_qwen3_next(tmp_path / "b", seed=3, dense=True)
    assert _hashes(a) == _hashes(b)
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["layer_types"] == tiny.DENSE_LAYER_TYPES == ["linear_attention", "full_attention", "linear_attention"]
    assert cfg["mlp_only_layers"] == [0, 1] and cfg["num_hidden_layers"] == 3 and cfg["intermediate_size"] == 256


def test_tokenizer_chat_template(qwen3):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen3)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "2 + 3 = ?"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\n2 + 3 = ?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.decode(tok("Hello, world! 12 + 30 = 42")["input_ids"]) == "Hello, world! 12 + 30 = 42"


def test_qwen3_trained_runs(qwen3):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen3)
    model = AutoModelForCausalLM.from_pretrained(qwen3)
    ids = torch.tensor([tok(tiny.corpus()[:2000])["input_ids"]])
    assert model(ids, labels=ids).loss.item() < 4.0  # untrained: ln(512) = 6.2
    out = model.generate(ids[:, :8], max_new_tokens=8, do_sample=False)
    assert out.shape == (1, 16)


def test_qwen3_next_runs(tmp_path):
    from transformers import AutoModelForCausalLM

    d = tiny.build_tiny_qwen3_next(tmp_path, seed=0)
    model = AutoModelForCausalLM.from_pretrained(d)
    assert model.dtype == torch.bfloat16
    logits = model(torch.arange(3, 19)[None]).logits
    assert logits.shape == (1, 16, 512) and torch.isfinite(logits).all()


def test_cli_tiny(tmp_path):
    r = CliRunner().invoke(app, ["tiny", "--kind", "qwen3-next", "--out", str(tmp_path / "m"), "--seed", "3"])
    assert r.exit_code == 0, r.output
    r2 = CliRunner().invoke(
        app, ["tiny", "--kind", "qwen3", "--out", str(tmp_path / "q"), "--train-steps", "0", "--dtype", "bfloat16"]
    )
    assert r2.exit_code == 0, r2.output
    assert json.loads((tmp_path / "q" / "config.json").read_text())["dtype"] == "bfloat16"
