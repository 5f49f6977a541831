import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from radiance_kernels.formats import awq
from radiance_quant import build, paroquant
from radiance_quant.cli import app
from radiance_quant.io import INDEX, Checkpoint, CheckpointError

Q = "model.layers.0.self_attn.q_proj"


def _edit(ckdir, name, fn):
    """Apply fn(tensors) to the shard holding `name` (fn may delete it) and keep the index in step."""
    index = json.loads((ckdir / INDEX).read_text())
    shard = ckdir / index["weight_map"][name]
    t = load_file(shard)
    fn(t)
    save_file(t, str(shard), metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k in t or v != shard.name}
    (ckdir / INDEX).write_text(json.dumps(index))
    return shard


def _hashes(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def test_verify_tiny_int4(int4, base):
    r = paroquant.verify(int4, base=base)
    assert len(r["linears"]) == 14
    assert r["max_identity_rel"] <= 1e-12
    assert r["max_base_rel_rms"] < 0.2
    assert set(r["unquantized"]) == {"lm_head", "model.embed_tokens"}
    assert Checkpoint(int4).config["quantization_config"] == {
        "quant_method": "paroquant",
        "bits": 4,
        "group_size": 128,
        "krot": 8,
    }


def test_verify_detects_wrong_nibble_order(int4, base, tmp_path):
    int4_copy = shutil.copytree(int4, tmp_path / "c")

    def swap(t):  # repack the codes in plain (non-AWQ) order
        codes = awq.unpack_int4(t[f"{Q}.qweight"]).to(torch.int64).reshape(128, -1, 8)
        t[f"{Q}.qweight"] = awq._to_int32(sum(codes[..., i] << (4 * i) for i in range(8)))

    _edit(int4_copy, f"{Q}.qweight", swap)
    paroquant.verify(int4_copy)  # without the base the order is not observable
    with pytest.raises(CheckpointError, match=rf"{Q}.qweight: quantized linear output is .* relRMS"):
        paroquant.verify(int4_copy, base=base)


BAD = {
    "non-permutation pairs": (
        f"{Q}.pairs",
        lambda t: t[f"{Q}.pairs"].__setitem__((0, 5), t[f"{Q}.pairs"][0, 6]),
        r"pairs layer 0 group 0 is not a permutation",
    ),
    "nan scales": (
        f"{Q}.scales",
        lambda t: t[f"{Q}.scales"].__setitem__((0, 0), float("nan")),
        rf"{Q}.scales: 1 non-finite",
    ),
    "inf theta": (f"{Q}.theta", lambda t: t[f"{Q}.theta"].__setitem__((1, 3), float("inf")), r"theta has 1 non-finite"),
    "zero channel scale": (
        f"{Q}.channel_scales",
        lambda t: t[f"{Q}.channel_scales"].__setitem__((0, 7), 0.0),
        r"channel_scales has 1 zero",
    ),
    "wrong dtype": (
        f"{Q}.scales",
        lambda t: t.__setitem__(f"{Q}.scales", t[f"{Q}.scales"].float()),
        rf"tensor {Q}.scales: expected torch.float16 \[1, 128\], got torch.float32",
    ),
    "wrong shape": (
        f"{Q}.qzeros",
        lambda t: t.__setitem__(f"{Q}.qzeros", t[f"{Q}.qzeros"][:, :8]),
        rf"tensor {Q}.qzeros: expected torch.int32 \[1, 16\], got torch.int32 \[1, 8\]",
    ),
    "missing tensor": (f"{Q}.theta", lambda t: t.pop(f"{Q}.theta"), rf"missing tensor {Q}.theta"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_named(int4_copy, case):
    name, fn, msg = BAD[case]
    shard = _edit(int4_copy, name, fn)
    with pytest.raises(CheckpointError, match=msg) as e:
        paroquant.verify(int4_copy)
    assert "1 of 7 quantized linears failed" in str(e.value)
    if case != "missing tensor":
        assert str(shard) in str(e.value)


def test_cli_verify_exit_codes(int4, base, int4_copy, tmp_path):
    r = CliRunner().invoke(app, ["verify", str(int4), "--base", str(base), "--report", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["max_identity_rel"] <= 1e-12
    _edit(int4_copy, f"{Q}.scales", lambda t: t[f"{Q}.scales"].__setitem__((0, 0), float("nan")))
    r = CliRunner().invoke(app, ["verify", str(int4_copy)])
    assert r.exit_code == 1 and f"{Q}.scales" in r.output


def test_truncated_shard(int4_copy):
    shard = sorted(int4_copy.glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=rf"{shard}: truncated shard: tensor .* ends at byte"):
        paroquant.verify(int4_copy)
    shard.write_bytes(shard.read_bytes()[:5])
    with pytest.raises(CheckpointError, match="truncated shard .* no safetensors header"):
        Checkpoint(int4_copy)


@pytest.mark.parametrize(
    "qc,msg",
    [
        ({"bits": 5}, r"qweight: expected torch.int32"),  # int5 needs qweight_hi: the first missing tensor is named
        ({"krot": 4}, r"theta: expected torch.float16 \[4, 128\], got torch.float16 \[8, 128\]"),
        ({"group_size": 64}, r"group_size 128"),
        ({"quant_method": "awq"}, r"not 'paroquant'/'paroquant_mxfp4' \('awq'\)"),
    ],
)
def test_config_mismatch(int4_copy, qc, msg):
    cfg = json.loads((int4_copy / "config.json").read_text())
    cfg["quantization_config"] |= qc
    (int4_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=msg if "bits" not in qc else "missing tensor .*qweight_hi"):
        paroquant.verify(int4_copy)


def test_int4_bits_but_hi_planes_present(base, tmp_path):
    out = tmp_path / "i5"
    build.build(base, out, "int5", seed=0)
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"]["bits"] = 4
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="qweight_hi present but quantization_config.bits is 4"):
        paroquant.verify(out)


def test_builder_refuses_other_model_dir(base, int4, tmp_path):
    before = _hashes(base)
    with pytest.raises(CheckpointError, match="not empty and not a radiance-quant output"):
        build.build(base, base, "int4")
    assert _hashes(base) == before
    out = tmp_path / "o"
    build.build(base, out, "int4", seed=0)
    before = _hashes(out)
    with pytest.raises(CheckpointError, match=r"different job or model \(differs in: \['rotations', 'tool'\]\)"):
        build.build(base, out, "int5", seed=1)
    r = CliRunner().invoke(app, ["build", str(base), str(out), "--format", "mxfp4"])
    assert r.exit_code == 1 and "different job or model" in r.output
    assert _hashes(out) == before


def test_builder_bad_rotations_touch_nothing(base, int4_copy, tmp_path):
    _edit(int4_copy, f"{Q}.pairs", lambda t: t[f"{Q}.pairs"].__setitem__((0, 5), t[f"{Q}.pairs"][0, 6]))
    with pytest.raises(CheckpointError, match=rf"{Q}: pairs layer 0 group 0"):
        build.build(base, tmp_path / "o", "int5", rotations=int4_copy)
    assert not (tmp_path / "o").exists()
