"""Fused stream producers (``RADIANCE_STREAM=1``): the op that makes a rotated linear's input also
rotates and quantizes it, so the linear skips its own ``rotate_quant``.

Installed after weight loading on every decoder layer whose consumers run the paroquant W4A8 method. The mixer is
attention (``self_attn``: ``input_layernorm`` → ``qkv_proj``, output ``o_proj``) or a Gated DeltaNet
(``linear_attn``: ``input_layernorm`` → ``in_proj_qkvz``, whose bf16 input also feeds ``in_proj_ba``; the per-head
gated RMSNorm ``norm`` → ``out_proj``); a dense MLP then has ``post_attention_layernorm`` → ``mlp.gate_up_proj``
and ``mlp.act_fn`` (SiluAndMul) → ``mlp.down_proj``:

- the norms become ``radiance::add_rms_norm_rotate_quant`` (residual add + RMSNorm + rotate + quant; vLLM's
  ``GemmaRMSNorm``, the (1 + w) weight of Qwen3-Next, with ``gemma=True``);
- the activation becomes ``radiance::gated_rotate_quant("silu_mul")``;
- the GDN's ``RMSNormGated`` (norm before the SiLU gate, 128-channel heads) becomes
  ``radiance::gated_rotate_quant("gated_rms_norm")``;
- ``in_proj_ba`` (bf16, on our skinny GEMM) runs after ``in_proj_qkvz``'s GEMM, which waited for the norm's output
  they both read, so it loads and multiplies beside that GEMM and writes after it (:func:`hand_after`,
  ``radiance::skinny_gemm``'s ``after``; H100 call 194: the 64-layer chained stack −0.6 to −0.9 %);
- the attention output gate of Qwen3-Next — inline code in vLLM's forward (``attn_output * torch.sigmoid(gate)``
  before ``o_proj``), not a module — becomes ``radiance::gated_rotate_quant("sigmoid_gate")``: the attention's
  forward is replaced by the same calls with that line as ``o_proj``'s producer (:func:`_gated_attention_forward`),
  where vLLM's forward is the form it mirrors; otherwise ``o_proj`` rotates its own input and the log says so.

A layer with an MoE block gets its mixer's producers only (its post-attention norm feeds the router and the experts,
no W4A8 method here). A layer whose consumers are only partly W4A8, or whose norm is not one of these, raises naming
the module.

The producer hands (A, AS, RS) to its consumer together with the tensor it returned; the consumer uses
them only for that very tensor or a view of it (the SiluAndMul and gated-norm producers return an unfilled token
of the right shape: their only reader is the consumer, which takes the handed activations). :func:`take`
is the partition-count guard: the GEMM would read past the activation buffer if fed fewer partitions
than the layer's rotation runs, so a mismatch raises.
With the knob on and no layer of the pattern, installing raises rather than serving unfused.

The other way (``RADIANCE_STREAM_DEFER``, on by default with the producers): a W4A8 GEMM whose output a producer
reads — ``gate_up_proj`` → the SiluAndMul producer, ``o_proj`` / ``out_proj`` → ``post_attention_layernorm``,
``down_proj`` → the next decoder layer's ``input_layernorm`` where that layer is fused — leaves its split-K partials
unreduced at decode (M within the decode band, bf16 activations, no bias; row-parallel ``o_proj`` / ``out_proj`` /
``down_proj`` only at TP=1, where no all-reduce stands between; not across a layer scale, which multiplies the
output first) and returns an unfilled token of the output's shape; the producer sums the partials as it loads them
(:func:`take_partials`), the GEMM's own reduction bit for bit, which takes the arrival count and the last program's
L2 round trips off the GEMM's tail (H200 call 101: 4-6 % of the 64-layer stack). A producer that meets a token it
was not handed for raises: the unfilled token is never read.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import MethodType

import torch

from radiance_vllm.backend import kernel_backend
from radiance_vllm.kernel_calls import act_element
from radiance_vllm.knobs import settings


class StreamPartitionError(RuntimeError):
    """A producer's activations do not match the consumer's partitions/shape."""


class StreamPatternError(RuntimeError):
    """A decoder layer half-matches the stream pattern (named in the message)."""


def _hand_over(consumer, hs: torch.Tensor, A, AS, RS) -> None:
    consumer.stream_input = (hs, A, AS, RS)
    sibling = getattr(consumer, "radiance_overlap", None)
    if sibling is not None:  # a GEMM output recorded in an earlier forward never meets this one's input
        sibling.radiance_after = None


def _same_tensor(handed: torch.Tensor, x: torch.Tensor) -> bool:
    """x is the handed tensor or a view of it with the same rows (the stash keeps its memory alive)."""
    return x.data_ptr() == handed.data_ptr() and x.shape[0] == handed.reshape(-1, x.shape[-1]).shape[0]


def take(layer, x: torch.Tensor):
    """(A, AS, RS) handed over for exactly ``x``, checked against the layer; None when there is none — which raises
    for a layer a producer was installed for (``radiance_fed_by``): a forward that bypasses its producer would
    otherwise serve unfused without a word."""
    handed = getattr(layer, "stream_input", None)
    if handed is None or not _same_tensor(handed[0], x):
        if getattr(layer, "radiance_fed_by", None):
            raise StreamPartitionError(f"{layer.prefix}: called on an input {tuple(x.shape)} that its producer "
                                       f"({layer.radiance_fed_by}) did not hand it: a forward bypasses the producer")
        return None
    layer.stream_input = None
    _, A, AS, RS = handed
    runs = len(layer.rot_bounds_list) - 1
    if A.dim() != 3 or A.shape[0] != runs or A.shape[1] != x.shape[0] or A.shape[2] != x.shape[1]:
        raise StreamPartitionError(f"{layer.prefix}: producer gave activations {tuple(A.shape)} for input "
                                   f"{tuple(x.shape)}; the layer has {runs} rotation partition(s)")
    return A, AS, RS


def hand_after(layer, x: torch.Tensor, y: torch.Tensor) -> None:
    """``layer``'s GEMM made ``y`` from the activations its producer handed it for ``x``, so it waited for the write
    of ``x``: the skinny linear reading the same ``x`` (``radiance_overlap``: in_proj_ba beside in_proj_qkvz) may run
    after it in the overlap form (``radiance::skinny_gemm``'s ``after``)."""
    sibling = getattr(layer, "radiance_overlap", None)
    if sibling is not None:
        sibling.radiance_after = (x, y)


def take_after(layer, x: torch.Tensor) -> torch.Tensor | None:
    """The GEMM output :func:`hand_after` recorded for exactly ``x`` (or a view with its rows), once; else None."""
    handed = getattr(layer, "radiance_after", None)
    layer.radiance_after = None
    return handed[1] if handed is not None and _same_tensor(handed[0], x) else None


def defer(producer, token: torch.Tensor, parts: torch.Tensor) -> None:
    """A GEMM hands its unreduced split partials to the producer that reads its output ``token``."""
    producer.deferred = (token, parts)


def take_partials(producer, x: torch.Tensor) -> torch.Tensor:
    """``x``, or the split partials handed over for exactly ``x`` (its GEMM left them unreduced)."""
    handed = getattr(producer, "deferred", None)
    if handed is None:
        return x
    producer.deferred = None
    token, parts = handed
    if not _same_tensor(token, x):
        raise StreamPartitionError(f"{type(producer).__name__}: a GEMM deferred its output {tuple(token.shape)} to "
                                   f"this producer, which was called on another tensor {tuple(x.shape)}")
    return parts


def _records(consumer):
    return consumer.rot_pairs, consumer.rot_theta, consumer.rot_scales


class StreamRMSNorm(torch.nn.Module):
    """vLLM RMSNorm (optionally with the residual add) fused with the consumer's rotate + quant."""

    def __init__(self, norm, consumer, gemma: bool):
        super().__init__()
        self.norm, self.consumer, self.gemma = norm, consumer, gemma

    def forward(self, x, residual=None):
        s = settings()
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        res = torch.zeros_like(x2) if residual is None else residual.reshape(-1, shape[-1])
        x2 = take_partials(self, x2)
        hs, res, A, AS, RS = torch.ops.radiance.add_rms_norm_rotate_quant(
            x2, res, self.norm.weight.data, self.norm.variance_epsilon, self.gemma, *_records(self.consumer),
            act_element(x2.shape[0]), s.pq_scales, kernel_backend())
        _hand_over(self.consumer, hs, A, AS, RS)
        return hs if residual is None else (hs, res.reshape(shape))


class StreamSiluMul(torch.nn.Module):
    """vLLM SiluAndMul (gate | up halves) fused with the down projection's rotate + quant."""

    def __init__(self, consumer):
        super().__init__()
        self.consumer = consumer

    def forward(self, gate_up):
        s = settings()
        d = gate_up.shape[-1] // 2
        g = gate_up.reshape(-1, 2 * d)
        parts = take_partials(self, g)
        gate, up = parts[..., :d], parts[..., d:]
        A, AS, RS = torch.ops.radiance.gated_rotate_quant("silu_mul", up, gate, None, 0.0, *_records(self.consumer),
                                                          act_element(g.shape[0]), s.pq_scales, kernel_backend())
        token = gate_up.new_empty(g.shape[0], d)  # identity token only: down_proj reads (A, AS, RS)
        _hand_over(self.consumer, token, A, AS, RS)
        return token.reshape(*gate_up.shape[:-1], d)


class StreamGatedRMSNorm(torch.nn.Module):
    """vLLM RMSNormGated of the GDN core output ``x`` [T, heads, 128] gated by silu(``z``), fused with the output
    projection's rotate + quant (the projection reads ``x`` flattened to [T, heads·128])."""

    def __init__(self, norm, consumer):
        super().__init__()
        self.norm, self.consumer = norm, consumer

    def forward(self, x, z):
        s = settings()
        x2, z2 = x.reshape(x.shape[0], -1), z.reshape(z.shape[0], -1)
        A, AS, RS = torch.ops.radiance.gated_rotate_quant("gated_rms_norm", x2, z2, self.norm.weight.data,
                                                          self.norm.eps, *_records(self.consumer),
                                                          act_element(x2.shape[0]), s.pq_scales, kernel_backend())
        token = x.new_empty(x2.shape)  # identity token only: the output projection reads (A, AS, RS)
        _hand_over(self.consumer, token, A, AS, RS)
        return token.view(x.shape)


class StreamOutputGate(torch.nn.Module):
    """The attention output gate ``x · sigmoid(gate)`` (core output and gate [T, heads·head_dim]) fused with
    ``o_proj``'s rotate + quant."""

    def __init__(self, consumer):
        super().__init__()
        self.consumer = consumer

    def forward(self, x, gate):
        s = settings()
        x2, g2 = x.reshape(-1, x.shape[-1]), gate.reshape(-1, gate.shape[-1])
        A, AS, RS = torch.ops.radiance.gated_rotate_quant("sigmoid_gate", x2, g2, None, 0.0, *_records(self.consumer),
                                                          act_element(x2.shape[0]), s.pq_scales, kernel_backend())
        token = x.new_empty(x2.shape)  # identity token only: o_proj reads (A, AS, RS)
        _hand_over(self.consumer, token, A, AS, RS)
        return token.view(x.shape)


def _gated_attention_forward(self, positions, hidden_states):
    """vLLM's Qwen3-Next attention forward, its inline output gate as ``o_proj``'s producer."""
    qkv, _ = self.qkv_proj(hidden_states)
    q, k, v, gate = self._project_qkv_gate(qkv, positions)
    output, _ = self.o_proj(self.radiance_output_gate(self.attn(q, k, v), gate))
    return output


#: The statements of vLLM's gated attention forward that :func:`_gated_attention_forward` mirrors, in order.
_GATED_FORWARD = ("qkv, _ = self.qkv_proj(hidden_states)", "q, k, v, gate = self._project_qkv_gate(qkv, positions)",
                  "attn_output = self.attn(q, k, v)", "attn_output = attn_output * torch.sigmoid(gate)",
                  "output, _ = self.o_proj(attn_output)")


def _output_gate(mixer) -> str:
    """How an attention mixer gates its output: "none", "inline" (vLLM's forward is the form
    :func:`_gated_attention_forward` mirrors) or "unknown" (gated some other way: left to vLLM)."""
    import inspect

    if not getattr(mixer, "attn_output_gate", False):
        return "none"
    try:
        lines = [ln.strip() for ln in inspect.getsource(type(mixer).forward).splitlines()]
    except (OSError, TypeError):
        return "unknown"
    found = [lines.index(st) if st in lines else -1 for st in _GATED_FORWARD]
    ok = -1 not in found and found == sorted(found) and hasattr(mixer, "_project_qkv_gate")
    return "inline" if ok else "unknown"


def _folds_its_norm(mixer) -> bool:
    """vLLM's GDN mixer computes its output norm inside its core kernel (the CUDA speculative-decode path reads the
    norm's weight itself and never calls the module): a producer there would not run."""
    return bool(getattr(mixer, "enable_fused_gdn_spec_decode", False))


def _is_w4a8(linear) -> bool:
    from radiance_vllm.paroquant_method import ParoQuantLinearMethod

    return isinstance(getattr(linear, "quant_method", None), ParoQuantLinearMethod)


def _single_rank(linear) -> bool:
    """No all-reduce after this linear's output (row-parallel layers reduce across TP ranks)."""
    return getattr(linear, "tp_size", 1) == 1 or not getattr(linear, "reduce_results", True)


#: A decoder layer's mixer: attribute → (the linear its input norm feeds, its output linear).
MIXERS = {"self_attn": ("qkv_proj", "o_proj"), "linear_attn": ("in_proj_qkvz", "out_proj")}


def _gemma(norm, name: str) -> bool:
    """Whether the decoder norm ``norm`` weighs by (1 + w) (GemmaRMSNorm) or by w (RMSNorm); others raise."""
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm

    if isinstance(norm, GemmaRMSNorm):
        return True
    if isinstance(norm, RMSNorm) and norm.has_weight and norm.variance_size_override is None:
        return False
    raise StreamPatternError(f"{name}: {type(norm).__name__} is not an RMSNorm the stream producer computes")


def _check_gated_norm(norm, name: str) -> None:
    """The GDN output norm must be the math of ``gated_rms_norm``: RMSNorm per 128-channel head, then · silu(z)."""
    from vllm.model_executor.layers.layernorm import RMSNormGated

    from radiance_kernels.formats.rotation import GROUP

    if not (isinstance(norm, RMSNormGated) and norm.norm_before_gate and norm.activation in ("silu", "swish")
            and norm.group_size in (None, GROUP) and norm.weight.numel() == GROUP and norm.bias is None):
        raise StreamPatternError(f"{name}: {type(norm).__name__} ({getattr(norm, 'activation', '?')} gate, "
                                 f"norm_before_gate={getattr(norm, 'norm_before_gate', '?')}) is not the per-head "
                                 "RMSNorm · silu(z) of the gated_rms_norm producer")


@dataclass
class _Plan:
    """What a decoder layer gets: its mixer (attribute, module), the output producer's kind ("gated_rms_norm",
    "sigmoid_gate", or why there is none: "folded" / "unknown" / "none"), whether its dense MLP is fused, and
    whether the input / post-attention norms are Gemma-style."""

    mixer_name: str
    mixer: torch.nn.Module
    output: str
    mlp: bool
    gemma_in: bool
    gemma_post: bool


def _plan(name: str, layer) -> _Plan | None:
    """The producers a decoder layer gets; None for a layer left unfused (an unknown mixer, no W4A8 consumer);
    raises on a half match, before any layer is touched."""
    mixer_name = next((m for m in MIXERS if hasattr(layer, m)), None)
    if mixer_name is None:
        return None
    mixer = getattr(layer, mixer_name)
    first, out = MIXERS[mixer_name]
    if mixer_name == "linear_attn":
        output = "folded" if _folds_its_norm(mixer) else "gated_rms_norm"
    else:
        output = {"inline": "sigmoid_gate", "unknown": "unknown", "none": "none"}[_output_gate(mixer)]
    consumers = {f"{mixer_name}.{first}": getattr(mixer, first, None)}
    if output in ("gated_rms_norm", "sigmoid_gate"):
        consumers[f"{mixer_name}.{out}"] = getattr(mixer, out, None)
    mlp = getattr(layer, "mlp", None)
    dense = hasattr(mlp, "gate_up_proj")
    if dense:
        consumers |= {"mlp.gate_up_proj": mlp.gate_up_proj, "mlp.down_proj": getattr(mlp, "down_proj", None)}
    w4a8 = {k: _is_w4a8(m) for k, m in consumers.items()}
    if not any(w4a8.values()):
        return None
    if not all(w4a8.values()):
        raise StreamPatternError(f"{name}: {[k for k, v in w4a8.items() if not v]} not on paroquant W4A8 while "
                                 f"{[k for k, v in w4a8.items() if v]} are: the stream pattern half-matches")
    if output == "gated_rms_norm":
        _check_gated_norm(getattr(mixer, "norm", None), f"{name}.linear_attn.norm")
    return _Plan(mixer_name, mixer, output, dense, _gemma(layer.input_layernorm, f"{name}.input_layernorm"),
                 dense and _gemma(layer.post_attention_layernorm, f"{name}.post_attention_layernorm"))


def _fuse(layer, plan: _Plan) -> None:
    """Install the producers of ``plan``; each consumer records which one feeds it (:func:`take`)."""
    first, out = (getattr(plan.mixer, a) for a in MIXERS[plan.mixer_name])
    layer.input_layernorm = StreamRMSNorm(layer.input_layernorm, first, plan.gemma_in)
    first.radiance_fed_by = "input_layernorm"
    ba = getattr(plan.mixer, "in_proj_ba", None)
    if plan.mixer_name == "linear_attn" and _is_skinny(ba):  # in_proj_ba reads in_proj_qkvz's input, after it
        first.radiance_overlap = ba
    if plan.output == "gated_rms_norm":
        plan.mixer.norm = StreamGatedRMSNorm(plan.mixer.norm, out)
    elif plan.output == "sigmoid_gate":
        plan.mixer.radiance_output_gate = StreamOutputGate(out)
        plan.mixer.forward = MethodType(_gated_attention_forward, plan.mixer)
    if plan.output in ("gated_rms_norm", "sigmoid_gate"):
        out.radiance_fed_by = plan.output
    if plan.mlp:
        layer.post_attention_layernorm = StreamRMSNorm(layer.post_attention_layernorm, layer.mlp.gate_up_proj,
                                                       plan.gemma_post)
        layer.mlp.act_fn = StreamSiluMul(layer.mlp.down_proj)
        layer.mlp.gate_up_proj.radiance_fed_by, layer.mlp.down_proj.radiance_fed_by = "post_attention_layernorm", \
            "silu_mul"


def _is_skinny(linear) -> bool:
    from radiance_vllm.skinny_method import SkinnyLinearMethod

    return isinstance(getattr(linear, "quant_method", None), SkinnyLinearMethod)


def _defer_pairs(layer, plan: _Plan, next_norm) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """(GEMM, the producer of ours that reads its output) of a fused layer; ``next_norm``: the next decoder layer's
    input norm. Not across a layer scale, which multiplies the outputs first."""
    if not plan.mlp:  # the post-attention norm and whatever follows the MoE block are vLLM's
        return []
    mlp = layer.mlp
    pairs = [(mlp.gate_up_proj, mlp.act_fn)]
    if not getattr(layer, "layer_scale", False):
        pairs.append((getattr(plan.mixer, MIXERS[plan.mixer_name][1], None), layer.post_attention_layernorm))
        if isinstance(next_norm, StreamRMSNorm):
            pairs.append((mlp.down_proj, next_norm))
    return pairs


def install(model: torch.nn.Module, defer_gemms: bool = False) -> int:
    """Install the producers on every matching decoder layer; returns the count (raises if none). ``defer_gemms``:
    also point each GEMM a producer reads at that producer (``radiance_defer_to``, module doc)."""
    layers = [(module, _plan(name, module)) for name, module in model.named_modules()
              if hasattr(module, "input_layernorm") and hasattr(module, "post_attention_layernorm")]
    for module, plan in layers:
        if plan is not None:
            _fuse(module, plan)
    plans = [plan for _, plan in layers if plan is not None]
    if not plans:
        raise RuntimeError("RADIANCE_STREAM=1 but no decoder layer has the stream pattern "
                           "(norm → qkv_proj / in_proj_qkvz / gate_up_proj, SiluAndMul → down_proj on paroquant W4A8)")
    deferred = 0
    for i, (module, plan) in enumerate(layers if defer_gemms else ()):
        if plan is None:
            continue
        next_norm = layers[i + 1][0].input_layernorm if i + 1 < len(layers) else None
        for gemm, producer in _defer_pairs(module, plan, next_norm):
            if _is_w4a8(gemm) and _single_rank(gemm):
                gemm.radiance_defer_to = producer
                deferred += 1
    count = {k: sum(p.output == k for p in plans) for k in ("sigmoid_gate", "folded", "unknown")}
    notes = [f"MLP on {sum(p.mlp for p in plans)}", f"attention output gate on {count['sigmoid_gate']}"]
    if count["folded"]:
        notes.append(f"{count['folded']} GDN output norms stay in vLLM's core (speculative decode): out_proj rotates "
                     "its input")
    if count["unknown"]:
        notes.append(f"{count['unknown']} attention output gates stay vLLM's (a forward this plugin does not mirror): "
                     "o_proj rotates its input")
    print(f"[radiance.stream] fused producers installed on {len(plans)} decoder layers ({'; '.join(notes)}); "
          f"{deferred} GEMMs leave their split partials to them", file=sys.stderr, flush=True)
    return len(plans)


def patch_loader() -> None:
    """Run :func:`install` right after vLLM's post-load weight processing (idempotent)."""
    from vllm.model_executor.model_loader import base_loader

    original = base_loader.process_weights_after_loading
    if getattr(original, "radiance_stream", False):
        return

    def process_then_install(model, model_config, target_device):
        original(model, model_config, target_device)
        install(model, settings().stream_defer)

    process_then_install.radiance_stream = True
    base_loader.process_weights_after_loading = process_then_install
