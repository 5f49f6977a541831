import hashlib
import json

import pytest
import torch
from typer.testing import CliRunner

from radiance_kernels.formats import awq, rotation
from radiance_quant import build, paroquant, tiny
from radiance_quant.cli import app
from radiance_quant.io import REPORT, Checkpoint, CheckpointError


def _shards(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.glob("model-*.safetensors"))}


def test_rotated_frame_identity():
    """y = rotate(x) @ W  with  W^T = to_rotated(W0)  equals  x @ W0^T, and from_rotated inverts it."""
    pairs, theta, cs = rotation.random_rotation(256, seed=3)
    w0 = torch.randn(64, 256, dtype=torch.float64)
    wt = paroquant.to_rotated(w0, pairs, theta, cs)
    x = torch.randn(5, 256, dtype=torch.float64)
    y = rotation.rotate(x, pairs, theta, cs, torch.float64) @ wt.T
    assert torch.allclose(y, x @ w0.T, rtol=0, atol=1e-12)
    assert torch.allclose(paroquant.from_rotated(wt, pairs, theta, cs), w0, rtol=0, atol=1e-12)


def test_int5_from_paroquant_rotations(base, int4, tmp_path):
    """int5 built with the int4 checkpoint's rotations = int5 built with the same random records."""
    a = tmp_path / "a"
    r = build.build(base, a, "int5", rotations=int4)
    build.build(base, tmp_path / "b", "int5", seed=0)
    assert _shards(a) == _shards(tmp_path / "b")
    assert Checkpoint(a).config["quantization_config"] == {
        "quant_method": "paroquant",
        "bits": 5,
        "group_size": 128,
        "krot": 8,
    }
    v = paroquant.verify(a, base=base)
    assert v["max_base_rel_rms"] < 0.5 * paroquant.verify(int4, base=base)["max_base_rel_rms"]
    ck = Checkpoint(a)
    assert ck.spec("model.layers.1.mlp.down_proj.qweight_hi") == (torch.int32, (256, 4))
    assert ck.spec("model.layers.1.mlp.down_proj.qzeros_hi") == (torch.int32, (2, 4))
    assert max(f["rel_rms"] for f in r["linears"].values()) < 0.07
    assert json.loads((a / REPORT).read_text())["tool"] == "build-int5"


def test_pow2_scales(base, tmp_path):
    r = build.build(base, tmp_path / "p", "int5", seed=0, pow2=True)
    s = Checkpoint(tmp_path / "p").get("model.layers.0.self_attn.q_proj.scales").float()
    assert torch.equal(s, torch.exp2(torch.round(torch.log2(s))))
    plain = build.build(base, tmp_path / "q", "int5", seed=0)
    m = "model.layers.0.mlp.up_proj"
    assert r["linears"][m]["rel_rms"] > plain["linears"][m]["rel_rms"]


def test_mxfp4_paro(base, tmp_path):
    r = build.build(base, tmp_path / "m", "mxfp4", seed=0, rule="mse")
    ck = Checkpoint(tmp_path / "m")
    assert ck.config["quantization_config"] == {"quant_method": "paroquant_mxfp4", "group_size": 128, "krot": 8}
    m = "model.layers.0.mlp.gate_proj"
    assert ck.spec(f"{m}.weight_packed") == (torch.uint8, (256, 64))
    assert ck.spec(f"{m}.weight_scale") == (torch.uint8, (256, 4))
    assert ck.spec(f"{m}.pairs") == (torch.int16, (8, 128)) and f"{m}.weight" not in ck
    v = paroquant.verify(tmp_path / "m", base=base)
    assert v["max_identity_rel"] <= 1e-12 and v["max_base_rel_rms"] < 0.2 and len(v["linears"]) == 14
    ocp = build.build(base, tmp_path / "o", "mxfp4", seed=0, rule="ocp")
    assert all(r["linears"][k]["rel_rms"] <= ocp["linears"][k]["rel_rms"] for k in r["linears"])


def test_cli_tiny_qwen3_next_nvfp4_mxfp4(tmp_path):
    args = ["tiny", "--kind", "nvfp4-mxfp4", "--family", "qwen3-next", "--out", str(tmp_path / "o")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    ck = Checkpoint(tmp_path / "o")
    assert ck.spec("model.layers.0.mlp.experts.1.down_proj.weight_scale")[0] == torch.uint8
    assert ck.spec("model.layers.0.linear_attn.in_proj_qkvz.weight_packed")[0] == torch.uint8
    assert ck.spec("lm_head.weight")[0] == torch.bfloat16


def test_qwen3_next_int4(tmp_path):
    nx = tiny.build_tiny_qwen3_next(tmp_path / "nx", seed=0)
    build.build(nx, tmp_path / "q", "int4", seed=0)
    v = paroquant.verify(tmp_path / "q", base=nx)
    assert "model.layers.0.mlp.experts.3.down_proj" in v["linears"]
    assert "model.layers.0.linear_attn.in_proj_qkvz" in v["linears"]
    assert {
        "model.layers.0.linear_attn.in_proj_ba",
        "model.layers.0.mlp.gate",
        "model.layers.0.mlp.shared_expert_gate",
        "lm_head",
    } <= set(v["unquantized"])
    ck = Checkpoint(tmp_path / "q")
    assert ck.spec("model.layers.0.linear_attn.in_proj_ba.weight")[0] == torch.bfloat16


def test_qwen3_next_dense_int4(base, int4, tmp_path):
    """The dense GDN hybrid's int4 checkpoint: its dense MLPs, GDN and attention projections and the MoE layer's
    shared expert quantized, the routed experts kept bf16 (the plugin serves no quantized experts); deterministic."""
    a = tiny.build_tiny_checkpoint(tmp_path / "a", "paroquant-int4", family="qwen3-next-dense")
    b = tiny.build_tiny_checkpoint(tmp_path / "b", "paroquant-int4", family="qwen3-next-dense")
    assert _shards(a) == _shards(b)
    v = paroquant.verify(a)
    assert v["max_identity_rel"] <= 1e-12
    assert {"model.layers.0.linear_attn.in_proj_qkvz", "model.layers.0.linear_attn.out_proj",
            "model.layers.0.mlp.gate_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj",
            "model.layers.2.mlp.shared_expert.up_proj"} <= set(v["linears"])
    assert {"model.layers.0.linear_attn.in_proj_ba", "model.layers.2.mlp.experts.3.down_proj"} <= set(v["unquantized"])
    with pytest.raises(ValueError, match="paroquant kinds only"):
        tiny.build_tiny_checkpoint(tmp_path / "n", "nvfp4", family="qwen3-next-dense")
    with pytest.raises(CheckpointError, match="keep applies to random rotations"):
        build.build(base, tmp_path / "k", "int4", rotations=int4, keep=tiny.ROUTED_EXPERTS)


@pytest.mark.parametrize(
    "kind,twice",
    [
        ("paroquant-int4", False),
        ("paroquant-int5", True),
        ("paroquant-mxfp4", True),
        ("nvfp4", False),
        ("nvfp4-mxfp4", True),
    ],
)
def test_cli_tiny_formats(kind, twice, tmp_path):
    args = ["tiny", "--kind", kind, "--train-steps", "0", "--seed", "1"]
    for d in ("a", "b") if twice else ("a",):
        r = CliRunner().invoke(app, [*args, "--out", str(tmp_path / d)])
        assert r.exit_code == 0, r.output
    assert _shards(tmp_path / "a") != {}
    if twice:
        assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    if kind.startswith("paroquant-int"):
        assert paroquant.verify(tmp_path / "a")["max_identity_rel"] <= 1e-12


def test_awq_codes_match_rtn_grid(base, int4):
    """Stored codes are exactly the RTN grid of the rotated base weight (the builder adds nothing)."""
    ck, b = Checkpoint(int4), Checkpoint(base)
    m = "model.layers.1.self_attn.o_proj"
    pairs, theta, cs = (ck.get(f"{m}.{k}") for k in ("pairs", "theta", "channel_scales"))
    wt = paroquant.to_rotated(b.get(f"{m}.weight"), pairs, theta, cs)
    codes, zeros, scales = awq.quantize_asym(wt.T.float(), 4)
    got = awq.from_checkpoint({k: ck.get(f"{m}.{k}") for k in ("qweight", "qzeros", "scales")})
    assert torch.equal(got[0], codes) and torch.equal(got[1], zeros) and torch.equal(got[2], scales)
