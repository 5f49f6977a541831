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


def test_a_consumer_its_producer_did_not_feed_raises():
    """A consumer with a producer installed that meets an input nobody handed it (a forward bypassing the producer)
    raises rather than rotating it itself."""
    layer, x = Consumer(), torch.zeros(3, 128)
    layer.radiance_fed_by = "input_layernorm"
    with pytest.raises(stream.StreamPartitionError, match=r"gate_up_proj: .* \(input_layernorm\) did not hand"):
        stream.take(layer, x)
    stream._hand_over(layer, x, torch.zeros(2, 3, 128, dtype=torch.uint8), torch.zeros(2, 3), torch.zeros(2, 3))
    assert stream.take(layer, x) is not None


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


@pytest.fixture(scope="module")
def vllm_config():
    """vLLM's norms are custom ops: built under a current vLLM config."""
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def _norm(gemma=False):
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm

    return GemmaRMSNorm(128) if gemma else RMSNorm(128)


def _gated_norm(activation="silu"):
    from vllm.model_executor.layers.layernorm import RMSNormGated

    return RMSNormGated(128, eps=1e-6, norm_before_gate=True, activation=activation)


def _decoder_layer(row_tp=1, mixer="self_attn", mlp="dense", gemma=False):
    """A decoder layer of the stream pattern: attention or GDN mixer, dense MLP or an MoE block (no gate_up)."""
    layer, mix, block = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    if mixer == "self_attn":
        mix.qkv_proj, mix.o_proj = _w4a8_linear(), _w4a8_linear(row_tp)
    else:
        mix.in_proj_qkvz, mix.in_proj_ba, mix.out_proj = _w4a8_linear(), torch.nn.Linear(128, 4), _w4a8_linear(row_tp)
        mix.norm = _gated_norm()
    if mlp == "dense":
        block.gate_up_proj, block.down_proj, block.act_fn = _w4a8_linear(), _w4a8_linear(row_tp), torch.nn.Identity()
    else:
        block.experts = torch.nn.Identity()
    setattr(layer, mixer, mix)
    layer.mlp = block
    layer.input_layernorm, layer.post_attention_layernorm = _norm(gemma), _norm(gemma)
    return layer


@pytest.mark.parametrize("row_tp", [1, 2])
def test_install_points_gemms_at_the_producers_that_read_them(row_tp, vllm_config):
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


def test_gdn_hybrid_gets_the_producers_and_moe_layers_their_mixers(vllm_config):
    """[GDN, attention, GDN + MoE] with Gemma norms: the input norm feeds in_proj_qkvz (in_proj_ba, bf16, reads the
    same hidden states untouched), the gated RMSNorm feeds out_proj, out_proj defers to the post-attention norm, the
    GDN layer's down to the attention layer's input norm, and the attention layer's down to the MoE layer's input
    norm; the MoE layer gets its mixer's producers only (its post-attention norm feeds the router and the experts)
    and its out_proj defers to nothing."""
    model = torch.nn.ModuleList([_decoder_layer(mixer="linear_attn", gemma=True), _decoder_layer(gemma=True),
                                 _decoder_layer(mixer="linear_attn", mlp="moe", gemma=True)])
    moe_post = model[2].post_attention_layernorm
    assert stream.install(model, defer_gemms=True) == 3
    gdn, attn, moe = model
    assert isinstance(gdn.input_layernorm, stream.StreamRMSNorm) and gdn.input_layernorm.gemma
    assert gdn.input_layernorm.consumer is gdn.linear_attn.in_proj_qkvz
    assert isinstance(gdn.linear_attn.norm, stream.StreamGatedRMSNorm)
    assert gdn.linear_attn.norm.consumer is gdn.linear_attn.out_proj and gdn.linear_attn.norm.norm.activation == "silu"
    assert gdn.linear_attn.out_proj.radiance_defer_to is gdn.post_attention_layernorm
    assert gdn.mlp.down_proj.radiance_defer_to is attn.input_layernorm
    assert attn.input_layernorm.consumer is attn.self_attn.qkv_proj
    assert attn.mlp.down_proj.radiance_defer_to is moe.input_layernorm
    assert moe.input_layernorm.consumer is moe.linear_attn.in_proj_qkvz
    assert moe.linear_attn.norm.consumer is moe.linear_attn.out_proj
    assert moe.post_attention_layernorm is moe_post and not hasattr(moe.linear_attn.out_proj, "radiance_defer_to")


def _skinny_linear(N=16, K=128, seed=0):
    from radiance_vllm.skinny_method import SkinnyLinearMethod

    lin, g = torch.nn.Module(), torch.Generator().manual_seed(seed)
    lin.quant_method = SkinnyLinearMethod()
    lin.weight = torch.nn.Parameter(torch.randn(N, K, generator=g).to(torch.bfloat16), requires_grad=False)
    lin.quant_method.process_weights_after_loading(lin)
    return lin


def test_gdn_in_proj_ba_runs_after_in_proj_qkvz(vllm_config):
    """A GDN layer whose in_proj_ba is on the skinny GEMM runs it after in_proj_qkvz's GEMM (``radiance_overlap``);
    one left on another method is not touched."""
    layer = _decoder_layer(mixer="linear_attn")
    layer.linear_attn.in_proj_ba = ba = _skinny_linear()
    plain = _decoder_layer(mixer="linear_attn")
    stream.install(torch.nn.ModuleList([layer, plain]))
    assert layer.linear_attn.in_proj_qkvz.radiance_overlap is ba
    assert not hasattr(plain.linear_attn.in_proj_qkvz, "radiance_overlap")


def test_skinny_runs_after_the_gemm_only_for_its_input_of_this_forward(monkeypatch):
    """in_proj_ba gets in_proj_qkvz's GEMM output as ``after`` only for the very input that GEMM's producer handed it,
    once; a record of an earlier forward is cleared by the next hand-over (in_proj_ba running first then gets none);
    the output is the plain call's either way."""
    from radiance_vllm import kernel_calls

    qkvz, ba = Consumer(), _skinny_linear()
    qkvz.radiance_overlap = ba
    seen, real = [], kernel_calls.skinny_gemm

    def spy(x, w, backend, after=None):
        seen.append(after)
        return real(x, w, backend, after)

    monkeypatch.setattr(kernel_calls, "skinny_gemm", spy)
    hs, y = torch.randn(3, 128).to(torch.bfloat16), torch.zeros(3, 8)
    stream._hand_over(qkvz, hs, None, None, None)
    stream.hand_after(qkvz, hs, y)
    out = ba.quant_method.apply(ba, hs)  # after the GEMM: overlap
    assert ba.quant_method.apply(ba, hs).equal(out)  # consumed once
    stream.hand_after(qkvz, hs, y)
    stream._hand_over(qkvz, hs, None, None, None)  # the next forward's producer, before its GEMM
    ba.quant_method.apply(ba, hs)
    stream.hand_after(qkvz, hs, y)
    ba.quant_method.apply(ba, hs.clone())  # another tensor
    assert [a is y for a in seen] == [True, False, False, False] and seen[1:] == [None] * 3
    assert out.equal((hs.float() @ ba.weight.float().t()).to(torch.bfloat16))


def test_gdn_norm_folded_into_the_core_stays_vllms(vllm_config, capsys):
    """Where vLLM's GDN core computes the output norm itself (CUDA speculative decode), the norm is left alone —
    out_proj rotates its own input — and the log says so; the layer's other producers are installed."""
    layer = _decoder_layer(mixer="linear_attn", gemma=True)
    layer.linear_attn.enable_fused_gdn_spec_decode = True
    layer.linear_attn.norm = norm = _gated_norm("sigmoid")  # not our math, but never replaced: no error
    assert stream.install(torch.nn.ModuleList([layer])) == 1
    assert layer.linear_attn.norm is norm and isinstance(layer.input_layernorm, stream.StreamRMSNorm)
    assert "1 GDN output norms stay in vLLM's core" in capsys.readouterr().err


def test_half_matching_layers_raise_naming_the_module(vllm_config):
    half = _decoder_layer(mixer="linear_attn")
    half.mlp.down_proj = torch.nn.Linear(256, 128)
    with pytest.raises(stream.StreamPatternError, match=r"0: \['mlp.down_proj'\] not on paroquant W4A8"):
        stream.install(torch.nn.ModuleList([half]))
    sigmoid = _decoder_layer(mixer="linear_attn")
    sigmoid.linear_attn.norm = _gated_norm("sigmoid")
    with pytest.raises(stream.StreamPatternError, match="0.linear_attn.norm: RMSNormGated \\(sigmoid gate"):
        stream.install(torch.nn.ModuleList([sigmoid]))
    layer_norm = _decoder_layer()
    layer_norm.post_attention_layernorm = torch.nn.LayerNorm(128)
    with pytest.raises(stream.StreamPatternError, match="0.post_attention_layernorm: LayerNorm is not an RMSNorm"):
        stream.install(torch.nn.ModuleList([layer_norm]))


def _bf16_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units of the last place of bf16 at b's magnitude."""
    ulp = torch.exp2(torch.floor(torch.log2(b.float().abs().clamp_min(1e-30))) - 7)
    return (a.float() - b.float()).abs() / ulp


@torch.no_grad()
def test_producer_math_is_vllms_norms_to_bf16_rounding(vllm_config):
    """The producers compute vLLM's Qwen3-Next norms in another fp32 order (tree sums, their own exp): the GDN's
    RMSNormGated (per 128-channel head, then · silu(z)) within one bf16 ulp of vLLM's, most outputs equal; the
    GemmaRMSNorm with the residual add ((1 + w)) within two, as vLLM's torch-native op normalizes the unrounded fp32
    sum where the producer (and vLLM's CUDA kernel) reads the bf16 residual. These roundings, fed through the model,
    are the served stream's whole difference from vLLM's norms (test_serve_gdn.py)."""
    import radiance_kernels.ops.stream  # noqa: F401  registers torch.ops.radiance

    g = torch.Generator().manual_seed(0)
    x, z, res = (torch.randn(16, 256, generator=g).to(torch.bfloat16) for _ in range(3))
    gated = _gated_norm()
    gated.weight.data = (1 + 0.1 * torch.randn(128, generator=g)).to(torch.bfloat16)
    ours = torch.ops.radiance.gated("gated_rms_norm", x, z, gated.weight.data, gated.eps, "reference")
    theirs = gated.forward_native(x.view(16, 2, 128), z.view(16, 2, 128)).view(16, 256)
    assert _bf16_ulps(ours, theirs).max() <= 1 and (ours == theirs).float().mean() > 0.9
    norm = _norm(gemma=True).to(torch.bfloat16)
    norm.weight.data = (0.1 * torch.randn(256, generator=g)).to(torch.bfloat16)
    hs, res2 = torch.ops.radiance.add_rms_norm(x, res, norm.weight.data, norm.variance_epsilon, True, "reference")
    their_hs, their_res = norm.forward_native(x.clone(), res.clone())
    assert res2.equal(their_res)
    assert _bf16_ulps(hs, their_hs).max() <= 2 and (hs == their_hs).float().mean() > 0.7


def _gated_norm_producer():
    """A GDN out_proj stand-in (one 256-channel partition, its rotation record) and its gated-norm producer."""
    import radiance_kernels.ops.stream  # noqa: F401
    from radiance_kernels.formats.rotation import random_rotation

    rotation = pairs, theta, cs = random_rotation(256, 8, seed=1)
    out_proj = torch.nn.Module()
    out_proj.prefix, out_proj.rot_bounds_list = "model.layers.0.linear_attn.out_proj", [0, 128]
    out_proj.rot_pairs, out_proj.rot_theta, out_proj.rot_scales = pairs[None], theta[None], cs
    return rotation, out_proj, stream.StreamGatedRMSNorm(_gated_norm().to(torch.bfloat16), out_proj)


def test_gated_norm_producer_hands_out_proj_its_flattened_input(vllm_config):
    """The GDN norm producer returns an unfilled [T, heads, 128] token; out_proj, called on its flatten(-2), takes
    exactly rotate_quant(gated_rms_norm(x, z)) of the chain."""
    from radiance_vllm import kernel_calls

    (pairs, theta, cs), out_proj, producer = _gated_norm_producer()
    g = torch.Generator().manual_seed(2)
    x, z = (torch.randn(5, 2, 128, generator=g).to(torch.bfloat16) for _ in range(2))
    token = producer(x, z)
    assert token.shape == x.shape
    A, AS, RS = stream.take(out_proj, token.flatten(-2))
    hs = torch.ops.radiance.gated("gated_rms_norm", x.view(5, 256), z.view(5, 256), producer.norm.weight.data,
                                  producer.norm.eps, "reference")
    s = stream.settings()
    want = kernel_calls.rotate_quant(hs, pairs[None], theta[None], cs, s.pq_act, s.pq_scales, "reference")
    assert all(a.equal(b) for a, b in zip((A, AS, RS), want, strict=True))


def test_producer_quantizes_to_the_decode_element_in_the_band(vllm_config, monkeypatch):
    """With RADIANCE_PQ_DECODE_ACT=int8 a producer quantizes a call of at most DECODE_MAX_M rows to int8 and a longer
    one to RADIANCE_PQ_ACT's e4m3, each equal to the chain's rotate_quant in that element."""
    from radiance_vllm import kernel_calls, knobs

    monkeypatch.setattr(knobs, "_SETTINGS", knobs.Settings.from_env({"RADIANCE_PQ_DECODE_ACT": "int8"}))
    (pairs, theta, cs), out_proj, producer = _gated_norm_producer()
    g = torch.Generator().manual_seed(3)
    band = kernel_calls.DECODE_MAX_M
    for rows, elem in ((band, "int8"), (band + 1, "e4m3")):
        x, z = (torch.randn(rows, 2, 128, generator=g).to(torch.bfloat16) for _ in range(2))
        A, AS, RS = stream.take(out_proj, producer(x, z).flatten(-2))
        hs = torch.ops.radiance.gated("gated_rms_norm", x.view(rows, 256), z.view(rows, 256),
                                      producer.norm.weight.data, producer.norm.eps, "reference")
        want = kernel_calls.rotate_quant(hs, pairs[None], theta[None], cs, elem, "group", "reference")
        assert A.dtype == want[0].dtype and all(a.equal(b) for a, b in zip((A, AS, RS), want, strict=True)), elem


def test_output_gate_check_reads_vllms_qwen3_next_attention():
    """vLLM's own Qwen3-Next attention forward is the form the output-gate producer mirrors ("inline"); without the
    gate there is nothing to fuse; a forward that gates elsewhere is left to vLLM ("unknown")."""
    from vllm.model_executor.models.qwen3_next import Qwen3NextAttention

    class GatesAfterProjection(Qwen3NextAttention):
        def forward(self, positions, hidden_states):
            qkv, _ = self.qkv_proj(hidden_states)
            q, k, v, gate = self._project_qkv_gate(qkv, positions)
            output, _ = self.o_proj(self.attn(q, k, v))
            return output * torch.sigmoid(gate)

    for cls, gated, want in ((Qwen3NextAttention, True, "inline"), (Qwen3NextAttention, False, "none"),
                             (GatesAfterProjection, True, "unknown")):
        mixer = cls.__new__(cls)
        torch.nn.Module.__init__(mixer)
        mixer.attn_output_gate = gated
        assert stream._output_gate(mixer) == want, cls


class _Projection(torch.nn.Module):
    """A W4A8 linear double: records the activations handed to it for its input (None where there were none)."""

    def __init__(self, K, seed):
        from radiance_kernels.formats.rotation import random_rotation
        from radiance_vllm.paroquant_method import ParoQuantLinearMethod

        super().__init__()
        self.quant_method, self.tp_size, self.reduce_results = ParoQuantLinearMethod(None), 1, True
        self.prefix, self.rot_bounds_list = "model.layers.0.self_attn.o_proj", [0, K]
        pairs, theta, self.rot_scales = random_rotation(K, 8, seed=seed)
        self.rot_pairs, self.rot_theta = pairs[None], theta[None]
        self.taken = None

    def forward(self, x):
        self.taken = stream.take(self, x)
        return x, None


class _GatedAttention(torch.nn.Module):
    """The shape of vLLM's Qwen3-Next attention: q | gate | k | v from one projection, the core, the gate inline."""

    attn_output_gate = True

    def __init__(self, K):
        super().__init__()
        self.qkv_proj, self.o_proj, self.K = _Projection(K, 1), _Projection(K, 2), K
        self.qkv_proj.forward = lambda x: (torch.cat([x, x.flip(-1) * 3, x, x], -1), None)
        self.attn = lambda q, k, v: q * k + v

    def _project_qkv_gate(self, qkv, positions):
        q, gate, k, v = qkv.split(self.K, dim=-1)
        return q, k, v, gate

    def forward(self, positions, hidden_states):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v, gate = self._project_qkv_gate(qkv, positions)
        attn_output = self.attn(q, k, v)
        attn_output = attn_output * torch.sigmoid(gate)
        output, _ = self.o_proj(attn_output)
        return output


@torch.no_grad()
def test_attention_output_gate_producer_hands_o_proj_its_input(vllm_config, capsys):
    """A gated attention mixer in vLLM's form: its forward now hands o_proj exactly rotate_quant(sigmoid_gate(core,
    gate)) of the chain (the gate computed as vLLM does within a bf16 ulp, test_producer_math…), and the log counts
    it; the same mixer with its gate left to vLLM (a forward of another form) keeps its forward and o_proj its own
    rotation, and the log says so."""
    import radiance_kernels.ops.stream  # noqa: F401
    from radiance_vllm import kernel_calls

    K = 256
    layer = _decoder_layer()
    layer.self_attn = mixer = _GatedAttention(K)
    layer.mlp.gate_up_proj.rot_bounds_list = [0, K]  # unused here; a dense MLP of W4A8 consumers
    assert stream.install(torch.nn.ModuleList([layer])) == 1
    assert "attention output gate on 1" in capsys.readouterr().err
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    out = mixer(None, x)
    A, AS, RS = mixer.o_proj.taken
    core, gate = x * x + x, x.flip(-1) * 3
    o = mixer.o_proj
    s = stream.settings()
    hs = torch.ops.radiance.gated("sigmoid_gate", core, gate, None, 0.0, "reference")
    want = kernel_calls.rotate_quant(hs, o.rot_pairs, o.rot_theta, o.rot_scales, s.pq_act, s.pq_scales, "reference")
    assert out.shape == x.shape and all(a.equal(b) for a, b in zip((A, AS, RS), want, strict=True))
    assert layer.input_layernorm.consumer is mixer.qkv_proj

    class GatesElsewhere(_GatedAttention):
        def forward(self, positions, hidden_states):
            return self.o_proj(self.attn(*self._project_qkv_gate(self.qkv_proj(hidden_states)[0], positions)[:3]))[0]

    layer = _decoder_layer()
    layer.self_attn = other = GatesElsewhere(K)
    stream.install(torch.nn.ModuleList([layer]))
    assert "1 attention output gates stay vLLM's" in capsys.readouterr().err
    assert "forward" not in vars(other) and not hasattr(other, "radiance_output_gate")
