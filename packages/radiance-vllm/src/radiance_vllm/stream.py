"""Fused stream producers (``RADIANCE_STREAM=1``): the op that makes a rotated linear's input also
rotates and quantizes it, so the linear skips its own ``rotate_quant``.

Installed after weight loading on every decoder layer with a dense MLP whose consumers run the paroquant W4A8
method. The mixer is attention (``self_attn``: ``input_layernorm`` → ``qkv_proj``, output ``o_proj``) or a Gated
DeltaNet (``linear_attn``: ``input_layernorm`` → ``in_proj_qkvz``, whose bf16 input also feeds ``in_proj_ba``;
the per-head gated RMSNorm ``norm`` → ``out_proj``); then ``post_attention_layernorm`` → ``mlp.gate_up_proj`` and
``mlp.act_fn`` (SiluAndMul) → ``mlp.down_proj``:

- the norms become ``radiance::add_rms_norm_rotate_quant`` (residual add + RMSNorm + rotate + quant; vLLM's
  ``GemmaRMSNorm``, the (1 + w) weight of Qwen3-Next, with ``gemma=True``);
- the activation becomes ``radiance::gated_rotate_quant("silu_mul")``;
- the GDN's ``RMSNormGated`` (norm before the SiLU gate, 128-channel heads) becomes
  ``radiance::gated_rotate_quant("gated_rms_norm")``.

A layer with an MoE block stays unfused. A layer whose consumers are only partly W4A8, or whose norm is not one of
these, raises naming the module. The attention output gate of Qwen3-Next is inline code, not a module: ``o_proj``
rotates and quantizes its own input.

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

import torch

from radiance_vllm.backend import kernel_backend
from radiance_vllm.knobs import settings


class StreamPartitionError(RuntimeError):
    """A producer's activations do not match the consumer's partitions/shape."""


class StreamPatternError(RuntimeError):
    """A decoder layer half-matches the stream pattern (named in the message)."""


def _hand_over(consumer, hs: torch.Tensor, A, AS, RS) -> None:
    consumer.stream_input = (hs, A, AS, RS)


def _same_tensor(handed: torch.Tensor, x: torch.Tensor) -> bool:
    """x is the handed tensor or a view of it with the same rows (the stash keeps its memory alive)."""
    return x.data_ptr() == handed.data_ptr() and x.shape[0] == handed.reshape(-1, x.shape[-1]).shape[0]


def take(layer, x: torch.Tensor):
    """(A, AS, RS) handed over for exactly ``x``, checked against the layer; None when there is none."""
    handed = getattr(layer, "stream_input", None)
    if handed is None or not _same_tensor(handed[0], x):
        return None
    layer.stream_input = None
    _, A, AS, RS = handed
    runs = len(layer.rot_bounds_list) - 1
    if A.dim() != 3 or A.shape[0] != runs or A.shape[1] != x.shape[0] or A.shape[2] != x.shape[1]:
        raise StreamPartitionError(f"{layer.prefix}: producer gave activations {tuple(A.shape)} for input "
                                   f"{tuple(x.shape)}; the layer has {runs} rotation partition(s)")
    return A, AS, RS


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
            s.pq_act, s.pq_scales, kernel_backend())
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
                                                          s.pq_act, s.pq_scales, kernel_backend())
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
                                                          self.norm.eps, *_records(self.consumer), s.pq_act,
                                                          s.pq_scales, kernel_backend())
        token = x.new_empty(x2.shape)  # identity token only: the output projection reads (A, AS, RS)
        _hand_over(self.consumer, token, A, AS, RS)
        return token.view(x.shape)


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


#: A decoder layer's mixer: attribute → (the linear its input norm feeds, the linear whose output the
#: post-attention norm reads).
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


def _fusable(name: str, layer) -> tuple[str, torch.nn.Module, bool, bool] | None:
    """(mixer attribute, mixer, whether the input / post-attention norms are Gemma-style) of a decoder layer whose
    producers can be installed; None for a layer left unfused (an MoE block, an unknown mixer, no W4A8 consumer);
    raises on a half match, before any layer is touched."""
    mixer_name = next((m for m in MIXERS if hasattr(layer, m)), None)
    mlp = getattr(layer, "mlp", None)
    if mixer_name is None or not hasattr(mlp, "gate_up_proj"):
        return None
    mixer = getattr(layer, mixer_name)
    first = MIXERS[mixer_name][0]
    consumers = {f"{mixer_name}.{first}": getattr(mixer, first, None), "mlp.gate_up_proj": mlp.gate_up_proj,
                 "mlp.down_proj": getattr(mlp, "down_proj", None)}
    if mixer_name == "linear_attn":  # the gated norm's consumer
        consumers["linear_attn.out_proj"] = getattr(mixer, "out_proj", None)
    w4a8 = {k: _is_w4a8(m) for k, m in consumers.items()}
    if not any(w4a8.values()):
        return None
    if not all(w4a8.values()):
        raise StreamPatternError(f"{name}: {[k for k, v in w4a8.items() if not v]} not on paroquant W4A8 while "
                                 f"{[k for k, v in w4a8.items() if v]} are: the stream pattern half-matches")
    if mixer_name == "linear_attn" and not _folds_its_norm(mixer):  # a folded norm stays vLLM's: any math
        _check_gated_norm(getattr(mixer, "norm", None), f"{name}.linear_attn.norm")
    return (mixer_name, mixer, _gemma(layer.input_layernorm, f"{name}.input_layernorm"),
            _gemma(layer.post_attention_layernorm, f"{name}.post_attention_layernorm"))


def install(model: torch.nn.Module, defer_gemms: bool = False) -> int:
    """Install the producers on every matching decoder layer; returns the count (raises if none). ``defer_gemms``:
    also point each GEMM a producer reads at that producer (``radiance_defer_to``, module doc)."""
    layers = [(module, _fusable(name, module)) for name, module in model.named_modules()
              if hasattr(module, "input_layernorm") and hasattr(module, "post_attention_layernorm")]
    folded = 0
    for module, fused in layers:  # (decoder layer, _fusable's answer: None where it stays unfused)
        if fused is None:
            continue
        mixer_name, mixer, gemma_in, gemma_post = fused
        first, out = (getattr(mixer, a, None) for a in MIXERS[mixer_name])
        module.input_layernorm = StreamRMSNorm(module.input_layernorm, first, gemma_in)
        module.post_attention_layernorm = StreamRMSNorm(module.post_attention_layernorm, module.mlp.gate_up_proj,
                                                        gemma_post)
        module.mlp.act_fn = StreamSiluMul(module.mlp.down_proj)
        if mixer_name == "linear_attn" and _folds_its_norm(mixer):
            folded += 1
        elif mixer_name == "linear_attn":
            mixer.norm = StreamGatedRMSNorm(mixer.norm, out)
    count = sum(fused is not None for _, fused in layers)
    if count == 0:
        raise RuntimeError("RADIANCE_STREAM=1 but no decoder layer has the stream pattern "
                           "(norm → qkv_proj / in_proj_qkvz / gate_up_proj, SiluAndMul → down_proj on paroquant W4A8)")
    deferred = 0
    for i, (module, fused) in enumerate(layers if defer_gemms else ()):
        if fused is None:
            continue
        mixer_name, mixer = fused[:2]
        mlp, scaled = module.mlp, getattr(module, "layer_scale", False)  # a layer scale multiplies the outputs
        pairs = [(mlp.gate_up_proj, mlp.act_fn)]
        if not scaled:
            pairs.append((getattr(mixer, MIXERS[mixer_name][1], None), module.post_attention_layernorm))
        if not scaled and i + 1 < len(layers) and layers[i + 1][1] is not None:  # the next layer's norm reads down
            pairs.append((mlp.down_proj, layers[i + 1][0].input_layernorm))
        for gemm, producer in pairs:
            if _is_w4a8(gemm) and _single_rank(gemm):
                gemm.radiance_defer_to = producer
                deferred += 1
    kept = f"; {folded} GDN output norms stay in vLLM's core (speculative decode): out_proj rotates its input" \
        if folded else ""
    print(f"[radiance.stream] fused producers installed on {count} decoder layers; {deferred} GEMMs leave their "
          f"split partials to them{kept}", file=sys.stderr, flush=True)
    return count


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
