"""NVFP4 → MXFP4 at load: the override is opt-in, and a merged NVFP4 linear serves the MXFP4 requant."""

import pytest
import torch
from vllm.model_executor.layers.linear import MergedColumnParallelLinear

from radiance_kernels.formats import mx
from radiance_quant.nvfp4 import ct_config, nvfp4_dequantize, nvfp4_quantize
from radiance_vllm import knobs
from radiance_vllm.nvfp4_config import NVFP4ToMXFP4Config
from radiance_vllm.requant_method import RequantLinearMethod
from radiance_vllm.sim_reference import SimLinear

K, SIZES = 128, [128, 64]
CT = ct_config(["re:.*mlp.*(gate|up|down)_proj$"], ["lm_head"])


@pytest.fixture
def knob_on(monkeypatch):
    monkeypatch.setattr(knobs, "_SETTINGS", knobs.Settings(nvfp4_mxfp4=True))


def test_override_is_opt_in(monkeypatch):
    monkeypatch.setattr(knobs, "_SETTINGS", knobs.Settings())
    assert NVFP4ToMXFP4Config.override_quantization_method(CT, None) is None
    monkeypatch.setattr(knobs, "_SETTINGS", knobs.Settings(nvfp4_mxfp4=True))
    assert NVFP4ToMXFP4Config.override_quantization_method(CT, None) == "radiance_nvfp4_mxfp4"
    assert NVFP4ToMXFP4Config.override_quantization_method({"quant_method": "paroquant"}, None) is None


def test_merged_nvfp4_linear_serves_its_mxfp4_requant(knob_on):
    cfg = NVFP4ToMXFP4Config.from_config(CT)
    cfg.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    layer = MergedColumnParallelLinear.__new__(MergedColumnParallelLinear)
    torch.nn.Module.__init__(layer)
    layer.prefix, layer.output_sizes, layer.tp_rank, layer.tp_size = "model.layers.0.mlp.gate_up_proj", SIZES, 0, 1
    layer.params_dtype = torch.float32
    method = RequantLinearMethod(cfg, "nvfp4", "mxfp4")
    method.create_weights(layer, K, SIZES, K, sum(SIZES), torch.float32, weight_loader=layer.weight_loader)
    gen = torch.Generator().manual_seed(0)
    shards = [nvfp4_quantize(torch.randn(n, K, generator=gen)) for n in SIZES]
    for i, t in enumerate(shards):
        for name, v in t.items():
            getattr(layer, name).weight_loader(getattr(layer, name), v, i)
    method.process_weights_after_loading(layer)
    x = torch.randn(4, K, generator=torch.Generator().manual_seed(7))
    y = method.apply(layer, x)
    w = torch.cat([nvfp4_dequantize(t["weight_packed"], t["weight_scale"], t["weight_global_scale"]) for t in shards])
    ref = SimLinear(mx.dequantize_mxfp4(*mx.quantize_mxfp4(w, rule="mse")), None, ("e4m3", "token"))
    torch.testing.assert_close(y, ref(x), rtol=0, atol=0)
