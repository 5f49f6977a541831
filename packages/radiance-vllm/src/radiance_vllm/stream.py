"""Fused stream producers (``RADIANCE_STREAM=1``): the op that makes a rotated linear's input also
rotates and quantizes it, so the linear skips its own ``rotate_quant``.

Installed after weight loading on every decoder layer of the dense pattern (``input_layernorm`` →
``self_attn.qkv_proj``, ``post_attention_layernorm`` → ``mlp.gate_up_proj``, ``mlp.act_fn`` (SiluAndMul)
→ ``mlp.down_proj``) whose consumers run the paroquant W4A8 method:

- the norms become ``radiance::add_rms_norm_rotate_quant`` (residual add + RMSNorm + rotate + quant);
- the activation becomes ``radiance::gated_rotate_quant("silu_mul")``.

The producer hands (A, AS, RS) to its consumer together with the tensor it returned; the consumer uses
them only for that very tensor or a view of it (the SiluAndMul producer returns an unfilled token of
the right shape: its only reader is ``down_proj``, which takes the handed activations). :func:`take`
is the partition-count guard: the GEMM would read past the activation buffer if fed fewer partitions
than the layer's rotation runs, so a mismatch raises.
With the knob on and no layer of the pattern, installing raises rather than serving unfused.

The other way (``RADIANCE_STREAM_DEFER``, on by default with the producers): a W4A8 GEMM whose output a producer
reads — ``gate_up_proj`` → the SiluAndMul producer, ``o_proj`` → ``post_attention_layernorm``, ``down_proj`` →
the next decoder layer's ``input_layernorm`` — leaves its split-K partials unreduced at decode (M within the decode
band, bf16 activations, no bias; row-parallel ``o_proj`` / ``down_proj`` only at TP=1, where no all-reduce stands
between) and returns an unfilled token of the output's shape; the producer sums the partials as it loads them
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

    def __init__(self, norm, consumer):
        super().__init__()
        self.norm, self.consumer = norm, consumer

    def forward(self, x, residual=None):
        s = settings()
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        res = torch.zeros_like(x2) if residual is None else residual.reshape(-1, shape[-1])
        x2 = take_partials(self, x2)
        hs, res, A, AS, RS = torch.ops.radiance.add_rms_norm_rotate_quant(
            x2, res, self.norm.weight.data, self.norm.variance_epsilon, False, *_records(self.consumer),
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


def _is_w4a8(linear) -> bool:
    from radiance_vllm.paroquant_method import ParoQuantLinearMethod

    return isinstance(getattr(linear, "quant_method", None), ParoQuantLinearMethod)


def _single_rank(linear) -> bool:
    """No all-reduce after this linear's output (row-parallel layers reduce across TP ranks)."""
    return getattr(linear, "tp_size", 1) == 1 or not getattr(linear, "reduce_results", True)


def install(model: torch.nn.Module, defer_gemms: bool = False) -> int:
    """Install the producers on every matching decoder layer; returns the count (raises if none). ``defer_gemms``:
    also point each GEMM a producer reads at that producer (``radiance_defer_to``, module doc)."""
    count, deferred, layers = 0, 0, []
    for module in model.modules():
        if not (hasattr(module, "input_layernorm") and hasattr(module, "post_attention_layernorm")):
            continue
        attn, mlp = getattr(module, "self_attn", None), getattr(module, "mlp", None)
        qkv, gate_up = getattr(attn, "qkv_proj", None), getattr(mlp, "gate_up_proj", None)
        down = getattr(mlp, "down_proj", None)
        ok = all(_is_w4a8(m) for m in (qkv, gate_up, down))
        layers.append((module, ok))
        if not ok:
            continue
        module.input_layernorm = StreamRMSNorm(module.input_layernorm, qkv)
        module.post_attention_layernorm = StreamRMSNorm(module.post_attention_layernorm, gate_up)
        mlp.act_fn = StreamSiluMul(down)
        count += 1
    if count == 0:
        raise RuntimeError("RADIANCE_STREAM=1 but no decoder layer has the stream pattern "
                           "(norm → qkv_proj / gate_up_proj, SiluAndMul → down_proj on paroquant W4A8)")
    for i, (module, ok) in enumerate(layers if defer_gemms else ()):
        if not ok:
            continue
        attn, mlp = module.self_attn, module.mlp
        pairs = [(mlp.gate_up_proj, mlp.act_fn), (getattr(attn, "o_proj", None), module.post_attention_layernorm)]
        if i + 1 < len(layers) and layers[i + 1][1]:  # the next decoder layer's norm reads this one's down_proj
            pairs.append((mlp.down_proj, layers[i + 1][0].input_layernorm))
        for gemm, producer in pairs:
            if _is_w4a8(gemm) and _single_rank(gemm):
                gemm.radiance_defer_to = producer
                deferred += 1
    print(f"[radiance.stream] fused producers installed on {count} decoder layers; {deferred} GEMMs leave their "
          "split partials to them", file=sys.stderr, flush=True)
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
