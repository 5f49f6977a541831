import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from radiance_kernels.formats import mx
from radiance_quant import nvfp4, tiny
from radiance_quant.io import INDEX, Checkpoint, CheckpointError


@pytest.fixture(scope="module")
def nv(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("nv") / "m"
    nvfp4.build_tiny_nvfp4(base, out)
    return out


def test_dequantize_spec():
    packed = torch.tensor([[0x21, 0xF9] * 8], dtype=torch.uint8)  # codes 1, 2, 9, 15 -> .5, 1, -.5, -6
    scale = torch.tensor([[2.0, 0.5]], dtype=torch.float32).to(torch.float8_e4m3fn)
    w = nvfp4.nvfp4_dequantize(packed, scale, torch.tensor([4.0]))
    assert w[0, :4].tolist() == [0.25, 0.5, -0.25, -3.0]
    assert w[0, 16:20].tolist() == [0.0625, 0.125, -0.0625, -0.75]


def test_quantize_roundtrip_and_per_tensor_requant():
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    t = nvfp4.nvfp4_quantize(w)
    assert t["weight_packed"].shape == (64, 128) and t["weight_scale"].dtype == torch.float8_e4m3fn
    assert t["weight_scale"].shape == (64, 16) and t["weight_global_scale"].shape == (1,)
    deq = nvfp4.nvfp4_dequantize(t["weight_packed"], t["weight_scale"], t["weight_global_scale"])
    assert 0.07 < float((deq - w).norm() / w.norm()) < 0.12
    errs = {}
    for rule in ("ocp", "mse"):
        packed, scales = nvfp4.nvfp4_to_mxfp4(t["weight_packed"], t["weight_scale"], t["weight_global_scale"], rule)
        ref = mx.quantize_mxfp4(deq, rule)
        assert torch.equal(packed, ref[0]) and torch.equal(scales, ref[1])
        errs[rule] = float((mx.dequantize_mxfp4(packed, scales) - deq).norm())
    assert errs["mse"] <= errs["ocp"]
    fp8 = (w / 0.01).to(torch.float8_e4m3fn)
    p, s = nvfp4.fp8_to_mxfp4(fp8, torch.full((64, 1), 0.01))
    assert torch.equal(p, mx.quantize_mxfp4(fp8.float() * 0.01, "mse")[0])


def test_convert_tiny(nv, tmp_path):
    r = nvfp4.convert(nv, tmp_path / "o")
    assert r["module_kinds"]["lm_head"] == "fp8" and r["module_kinds"]["model.layers.0.mlp.up_proj"] == "nvfp4"
    ck = Checkpoint(tmp_path / "o")
    assert ck.config["quantization_config"] == {"quant_method": "radiance_mxfp4", "block_size": 32, "exp_rule": "mse"}
    assert ck.spec("lm_head.weight")[0] == torch.bfloat16
    for m in ("model.layers.1.mlp.down_proj", "model.layers.0.self_attn.k_proj"):
        assert ck.spec(f"{m}.weight_scale")[0] == torch.uint8 and f"{m}.weight" not in ck
        assert f"{m}.input_global_scale" not in ck
    assert len(r["linears"]) == 14 and max(v["rel_rms"] for v in r["linears"].values()) < 0.13
    src = Checkpoint(nv)
    assert torch.equal(
        src.get("model.layers.0.mlp.gate_proj.weight_global_scale"),
        src.get("model.layers.0.mlp.up_proj.weight_global_scale"),
    )
    kept = nvfp4.convert(nv, tmp_path / "k", fp8_layers="bf16", rule="ocp")
    assert len(kept["linears"]) == 6
    assert Checkpoint(tmp_path / "k").spec("model.layers.0.self_attn.q_proj.weight")[0] == torch.bfloat16


def test_convert_in_proj_ab(tmp_path):
    nx = tiny.build_tiny_qwen3_next(tmp_path / "nx")
    nvfp4.build_tiny_nvfp4(nx, tmp_path / "nv")
    m = "model.layers.0.linear_attn.in_proj_ba"
    assert Checkpoint(tmp_path / "nv").spec(f"{m}.weight")[0] == torch.bfloat16
    nvfp4.convert(tmp_path / "nv", tmp_path / "a")
    assert f"{m}.weight" in Checkpoint(tmp_path / "a")
    nvfp4.convert(tmp_path / "nv", tmp_path / "b", in_proj_ab=True)
    ck = Checkpoint(tmp_path / "b")
    assert ck.spec(f"{m}.weight_packed") == (torch.uint8, (4, 64))
    assert ck.spec("model.layers.0.mlp.experts.2.up_proj.weight_scale") == (torch.uint8, (128, 4))


def test_bad_scale_touches_nothing(nv, tmp_path):
    import shutil

    d = shutil.copytree(nv, tmp_path / "nv")
    name = "model.layers.1.mlp.gate_proj.weight_scale"
    shard = d / json.loads((d / INDEX).read_text())["weight_map"][name]
    t = load_file(shard)
    t[name] = t[name].float().index_fill(1, torch.tensor([3]), float("nan")).to(torch.float8_e4m3fn)
    save_file(t, str(shard), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"{shard}: tensor {name}: non-finite"):
        nvfp4.convert(d, tmp_path / "o")
    assert not (tmp_path / "o").exists()
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["quant_method"] = "fp8"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="is not 'compressed-tensors'"):
        nvfp4.convert(d, tmp_path / "o")
