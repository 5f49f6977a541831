import pytest
import torch

from radiance_vllm import stream


class Consumer(torch.nn.Module):
    prefix = "model.layers.0.mlp.gate_up_proj"
    rot_bounds_list = [0, 128, 192]  # two rotation runs


def test_handed_activations_are_used_only_for_their_tensor():
    layer, x = Consumer(), torch.zeros(3, 128)
    A, S = torch.zeros(2, 3, 128, dtype=torch.uint8), torch.zeros(2, 3)
    stream._hand_over(layer, x, A, S, S)
    assert stream.take(layer, torch.zeros(3, 128)) is None
    assert stream.take(layer, x)[0] is A
    assert stream.take(layer, x) is None  # consumed once


def test_partition_count_guard_raises_instead_of_reading_past_the_buffer():
    layer, x = Consumer(), torch.zeros(3, 128)
    stream._hand_over(layer, x, torch.zeros(1, 3, 128, dtype=torch.uint8), torch.zeros(1, 3), torch.zeros(1, 3))
    with pytest.raises(stream.StreamPartitionError, match="2 rotation partition"):
        stream.take(layer, x)


def test_install_without_the_pattern_raises():
    with pytest.raises(RuntimeError, match="RADIANCE_STREAM=1 but no decoder layer"):
        stream.install(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_deferred_partials_are_taken_only_for_their_token():
    """A GEMM's deferred split partials reach the producer only for the very token it returned (or a view of it with
    the same rows), once; another tensor while a handoff is pending raises, so the unfilled token is never read."""
    producer, token = torch.nn.Module(), torch.empty(3, 128, dtype=torch.bfloat16)
    parts = torch.zeros(2, 3, 128)
    x = torch.ones(3, 128, dtype=torch.bfloat16)
    assert stream.take_partials(producer, x) is x  # nothing handed: the input itself
    stream.defer(producer, token, parts)
    assert stream.take_partials(producer, token.view(3, 128)) is parts
    assert stream.take_partials(producer, token) is token  # consumed once
    stream.defer(producer, token, parts)
    with pytest.raises(stream.StreamPartitionError, match="deferred its output"):
        stream.take_partials(producer, x)


def _w4a8_linear(tp_size=1):
    from radiance_vllm.paroquant_method import ParoQuantLinearMethod

    lin = torch.nn.Module()
    lin.quant_method, lin.tp_size, lin.reduce_results = ParoQuantLinearMethod(None), tp_size, True
    return lin


def _decoder_layer(row_tp=1):
    layer, attn, mlp = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    attn.qkv_proj, attn.o_proj = _w4a8_linear(), _w4a8_linear(row_tp)
    mlp.gate_up_proj, mlp.down_proj, mlp.act_fn = _w4a8_linear(), _w4a8_linear(row_tp), torch.nn.Identity()
    layer.self_attn, layer.mlp = attn, mlp
    layer.input_layernorm, layer.post_attention_layernorm = torch.nn.Identity(), torch.nn.Identity()
    return layer


@pytest.mark.parametrize("row_tp", [1, 2])
def test_install_points_gemms_at_the_producers_that_read_them(row_tp):
    """gate_up → its SiluAndMul producer, o_proj → the post-attention norm, down → the next layer's input norm (none
    for the last layer: the model's final norm is not a producer); row-parallel o_proj / down only at TP=1 (an
    all-reduce stands between them and the norm otherwise); nothing without ``defer_gemms``."""
    model = torch.nn.ModuleList([_decoder_layer(row_tp) for _ in range(3)])
    assert stream.install(model, defer_gemms=True) == 3
    for i, layer in enumerate(model):
        mlp, attn = layer.mlp, layer.self_attn
        assert mlp.gate_up_proj.radiance_defer_to is mlp.act_fn
        assert getattr(attn.o_proj, "radiance_defer_to", None) is (layer.post_attention_layernorm
                                                                    if row_tp == 1 else None)
        nxt = model[i + 1].input_layernorm if i + 1 < len(model) and row_tp == 1 else None
        assert getattr(mlp.down_proj, "radiance_defer_to", None) is nxt
    plain = torch.nn.ModuleList([_decoder_layer() for _ in range(2)])
    stream.install(plain)
    assert not any(hasattr(m, "radiance_defer_to") for m in plain.modules())
