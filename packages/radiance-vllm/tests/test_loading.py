"""Loading a merged linear through vLLM's own fused-weight loader, without a server."""

import pytest
import torch
from vllm.model_executor.layers.linear import MergedColumnParallelLinear

from radiance_kernels.formats import awq, mx
from radiance_kernels.formats.rotation import dense_matrix, random_rotation
from radiance_vllm.mxfp4_config import ParoQuantMXFP4Config
from radiance_vllm.mxfp4_method import MXFP4LinearMethod
from radiance_vllm.param_loading import CheckpointError
from radiance_vllm.paroquant_config import ParoQuantConfig
from radiance_vllm.paroquant_method import ParoQuantLinearMethod
from radiance_vllm.sim_reference import SimLinear

K, SIZES = 128, [128, 64]
PREFIX = "model.layers.0.mlp.gate_up_proj"


def projection(seed, bits, rotation_seed=None):
    """Checkpoint tensors of one projection: int4/int5 (bits 4/5) or MXFP4 (bits 0)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(SIZES[seed % 2], K, generator=g, dtype=torch.float64)
    pairs, theta, cs = random_rotation(K, 8, seed=seed if rotation_seed is None else rotation_seed)
    wr = (w / cs.double()) @ dense_matrix(pairs, theta).T
    rot = {"pairs": pairs, "theta": theta, "channel_scales": cs}
    if bits == 0:
        packed, scales = mx.quantize_mxfp4(wr, rule="mse")
        return {"weight_packed": packed, "weight_scale": scales} | rot
    codes, zeros, scales = awq.quantize_asym(wr.T.contiguous(), bits)
    return awq.to_checkpoint(codes, zeros, scales, bits) | rot


def dequantized(t):
    if "weight_packed" in t:
        return mx.dequantize_mxfp4(t["weight_packed"], t["weight_scale"])
    codes, zeros, scales, _ = awq.from_checkpoint(t)
    return awq.dequantize(codes, zeros, scales).T


def make_layer(bits=4):
    cfg = ParoQuantConfig(bits=bits, group_size=128, krot=8) if bits else ParoQuantMXFP4Config(krot=8, group_size=128)
    cfg.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    layer = MergedColumnParallelLinear.__new__(MergedColumnParallelLinear)
    torch.nn.Module.__init__(layer)
    layer.prefix, layer.output_sizes, layer.tp_rank, layer.tp_size = PREFIX, SIZES, 0, 1
    method = ParoQuantLinearMethod(cfg) if bits else MXFP4LinearMethod(cfg)
    method.create_weights(layer, K, SIZES, K, sum(SIZES), torch.float32, weight_loader=layer.weight_loader)
    return layer, method


def load(layer, shards):
    for shard_id, tensors in enumerate(shards):
        for name, t in tensors.items():
            param = getattr(layer, name)
            param.weight_loader(param, t, shard_id)


@pytest.mark.parametrize("bits", [4, 5, 0])
def test_merged_linear_loads_and_matches_the_simulated_reference(bits):
    shards = [projection(0, bits), projection(1, bits)]
    layer, method = make_layer(bits)
    load(layer, shards)
    method.process_weights_after_loading(layer)
    assert layer.rot_bounds_list == [0, 128, 192] and layer.rot_pairs.shape == (2, 8, K)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(9))
    y = method.apply(layer, x)
    act = ("e4m3", "group") if bits else ("e4m3", "token")
    for i, (lo, hi) in enumerate([(0, 128), (128, 192)]):
        rot = (shards[i]["pairs"], shards[i]["theta"], shards[i]["channel_scales"])
        ref = SimLinear(dequantized(shards[i]), rot, act)
        torch.testing.assert_close(y[:, lo:hi], ref(x), rtol=0, atol=0)


def test_identical_adjacent_rotations_are_deduped():
    shards = [projection(0, 4, rotation_seed=5), projection(1, 4, rotation_seed=5)]
    layer, method = make_layer()
    load(layer, shards)
    method.process_weights_after_loading(layer)
    assert layer.rot_bounds_list == [0, 192] and layer.rot_pairs.shape == (1, 8, K)


def corrupt(shards, shard, name, fn):
    shards[shard] = dict(shards[shard])
    shards[shard][name] = fn(shards[shard][name])
    return shards


@pytest.mark.parametrize("name,fn,message", [
    ("qweight", lambda t: t[:, :-1], r"mlp\.up_proj\.qweight: checkpoint shape \(128, 7\)"),
    ("qweight", lambda t: t.float(), r"mlp\.up_proj\.qweight: dtype torch\.float32"),
    ("theta", lambda t: t[:, :-2], r"mlp\.up_proj\.theta: checkpoint shape"),
])
def test_bad_tensor_fails_at_load_naming_it(name, fn, message):
    layer, _ = make_layer()
    with pytest.raises(CheckpointError, match=message):
        load(layer, corrupt([projection(0, 4), projection(1, 4)], 1, name, fn))


def swap_two(t):
    t = t.clone()
    t[3, 10] = t[3, 11]
    return t


def nan_at(t):
    t = t.clone()
    t[0, 5] = float("nan")
    return t


@pytest.mark.parametrize("name,fn,message", [
    ("pairs", swap_two, r"mlp\.up_proj\.\{pairs,theta,channel_scales\}: pairs layer 3 group 0 is not a permutation"),
    ("scales", nan_at, r"mlp\.up_proj\.scales: 1 non-finite"),
    ("channel_scales", nan_at, r"mlp\.up_proj\.\{pairs,theta,channel_scales\}: channel_scales"),
])
def test_bad_values_fail_after_load_naming_the_tensor(name, fn, message):
    layer, method = make_layer()
    load(layer, corrupt([projection(0, 4), projection(1, 4)], 1, name, fn))
    with pytest.raises(CheckpointError, match=message):
        method.process_weights_after_loading(layer)


def test_unquantized_modules_are_detected_from_the_checkpoint():
    from radiance_vllm.skinny_method import SkinnyLinearMethod

    layer, _ = make_layer()
    cfg = ParoQuantConfig(bits=4, group_size=128, krot=8)
    cfg.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    cfg.quantized_modules = frozenset({"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"})
    assert isinstance(cfg.get_quant_method(layer, PREFIX), ParoQuantLinearMethod)
    assert isinstance(cfg.get_quant_method(layer, "model.layers.1.mlp.gate_up_proj"), SkinnyLinearMethod)
    cfg.quantized_modules = frozenset({"model.layers.0.mlp.gate_proj"})
    with pytest.raises(CheckpointError, match=r"mixes quantized \['model.layers.0.mlp.gate_proj'\]"):
        cfg.get_quant_method(layer, PREFIX)


def test_qkvz_like_four_partitions_run_as_two_rotations():
    from radiance_vllm.rotation_params import runs_of

    a, b = random_rotation(K, 8, seed=1), random_rotation(K, 8, seed=2)
    recs = [a, a, a, b]
    pairs, theta, scales = (torch.stack([r[i] for r in recs]) for i in range(3))
    assert runs_of(pairs, theta, scales[:, 0]) == [(0, 3), (3, 4)]


@torch.no_grad()
def test_skinny_linears_run_the_skinny_gemm_at_decode(monkeypatch):
    """A bf16 linear left unquantized with 16 <= N <= 128 runs radiance::skinny_gemm at decode (M <= 16, no bias) —
    exactly its reference, fp32 sums rounded once — and vLLM's own GEMM otherwise (more tokens, a bias, N outside
    the band), after vLLM's CPU path has packed the weight away. The bias is the layer's parameter, as vLLM's linears
    hold it: on AMX CPUs vLLM's small-N packed GEMM converts it to fp32 at load and refuses a bf16 one."""
    from radiance_vllm import kernel_calls
    from radiance_vllm.skinny_method import SkinnyLinearMethod

    calls = []
    real = kernel_calls.skinny_gemm
    monkeypatch.setattr(kernel_calls, "skinny_gemm", lambda *a: calls.append(a[0].shape) or real(*a))
    g = torch.Generator().manual_seed(0)
    for N, M, bias, runs in ((96, 8, False, True), (96, 16, False, True), (48, 1, False, True),
                             (96, 17, False, False), (96, 8, True, False), (8, 8, False, False)):
        layer, method = torch.nn.Module(), SkinnyLinearMethod()
        w = torch.randn(N, 256, generator=g).to(torch.bfloat16)
        layer.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
        b = torch.randn(N, generator=g).to(torch.bfloat16) if bias else None
        layer.bias = None if b is None else torch.nn.Parameter(b.clone(), requires_grad=False)
        method.process_weights_after_loading(layer)
        x = torch.randn(2, M, 256, generator=g).to(torch.bfloat16)[0]
        calls.clear()
        y = method.apply(layer, x, layer.bias)
        assert (calls == [x.shape]) == runs and y.shape == (M, N) and y.dtype == torch.bfloat16
        want = (x.float() @ w.float().t()).to(torch.bfloat16)
        if runs:
            assert y.equal(want)
        else:
            torch.testing.assert_close(y, want if b is None else want + b, rtol=2e-2, atol=2e-2)
