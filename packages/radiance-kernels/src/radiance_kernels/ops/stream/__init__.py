"""Stream producers: the activation producers that feed rotated linears, plain and fused with
``rotate_quant`` (math in :mod:`.reference`; the fused kernels are byte-identical to the chain
plain producer → ``rotate_quant``).

- ``add_rms_norm(x, residual, weight, eps, gemma, backend) -> (hs, residual')``
- ``add_rms_norm_rotate_quant(x, residual, weight, eps, gemma, pairs, theta, channel_scales, elem,
  granularity, backend) -> (hs, residual', A, AS, RS)``
- ``gated(kind, x, gate, weight?, eps, backend) -> out`` with kind ``silu_mul`` | ``sigmoid_gate`` |
  ``gated_rms_norm``
- ``gated_rotate_quant(kind, x, gate, weight?, eps, pairs, theta, channel_scales, elem, granularity,
  backend) -> (A, AS, RS)``

Activations [M, K] bf16/fp16/fp32 (rows may be strided, channels contiguous), weights 1-D in the
activation dtype; records and outputs as in :mod:`radiance_kernels.ops.rotate_quant`. ``x`` and ``gate`` may each be
a split-K GEMM's fp32 partials [S, M, K] (``radiance::w4a8_gemm_partials``): the kernels sum them as they load them
(the GEMM's own reduction, bit for bit) and the activations are bf16 (:mod:`.reference`). Version 2: the partials.
"""

from __future__ import annotations

import torch

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.registry import implementation, register_op
from radiance_kernels.ops.rotate_quant import fake_outputs
from radiance_kernels.ops.rotate_quant import reference as rq_ref
from radiance_kernels.ops.stream import reference

VERSION = 2


def _launch(producer, a, b, weight, eps, rotation=None, elem=None, granularity=None, store_hs=True):
    from radiance_kernels.ops.stream import triton as impl

    if rotation is not None:
        rq_ref.check_records(*rotation, a.shape[-1])
        rq_ref.check_quant(elem, granularity)
    return impl.launch(producer, a, b, weight, eps, rotation, elem, granularity, store_hs=store_hs,
                       hw=not triton_interpreted())


def _norm_name(gemma: bool) -> str:
    return "add_rms_gemma" if gemma else "add_rms"


def _triton_add_rms_norm(x, residual, weight, eps, gemma):
    reference.check_add_rms_norm(x, residual, weight)
    out = _launch(_norm_name(gemma), x, residual, weight, eps)
    return out["hs"], out["residual"]


def _triton_add_rms_norm_rq(x, residual, weight, eps, gemma, pairs, theta, channel_scales, elem, granularity):
    reference.check_add_rms_norm(x, residual, weight)
    out = _launch(_norm_name(gemma), x, residual, weight, eps, (pairs, theta, channel_scales), elem, granularity)
    return out["hs"], out["residual"], out["A"], out["AS"], out["RS"]


def _triton_gated(kind, x, gate, weight, eps):
    reference.check_gated(kind, x, gate, weight)
    return _launch(kind, x, gate, weight, eps)["hs"]


def _triton_gated_rq(kind, x, gate, weight, eps, pairs, theta, channel_scales, elem, granularity):
    reference.check_gated(kind, x, gate, weight)
    out = _launch(kind, x, gate, weight, eps, (pairs, theta, channel_scales), elem, granularity, store_hs=False)
    return out["A"], out["AS"], out["RS"]


register_op("add_rms_norm", VERSION, reference=reference.add_rms_norm, triton=_triton_add_rms_norm)
register_op("add_rms_norm_rotate_quant", VERSION, reference=reference.add_rms_norm_rotate_quant,
            triton=_triton_add_rms_norm_rq)
register_op("gated", VERSION, reference=reference.gated, triton=_triton_gated)
register_op("gated_rotate_quant", VERSION, reference=reference.gated_rotate_quant, triton=_triton_gated_rq)


@torch.library.custom_op("radiance::add_rms_norm", mutates_args=())
def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool, backend: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return implementation("add_rms_norm", backend, x.device)(x, residual, weight, eps, gemma)


def _fake_act(x):
    return x.new_empty(x.shape[-2:], dtype=reference.act_dtype(x))


@add_rms_norm.register_fake
def _(x, residual, weight, eps, gemma, backend):
    return _fake_act(x), _fake_act(x)


@torch.library.custom_op("radiance::add_rms_norm_rotate_quant", mutates_args=())
def add_rms_norm_rotate_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool,
    pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, elem: str, granularity: str,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return implementation("add_rms_norm_rotate_quant", backend, x.device)(
        x, residual, weight, eps, gemma, pairs, theta, channel_scales, elem, granularity)


@add_rms_norm_rotate_quant.register_fake
def _(x, residual, weight, eps, gemma, pairs, theta, channel_scales, elem, granularity, backend):
    return (_fake_act(x), _fake_act(x), *fake_outputs(x, pairs, elem, granularity))


@torch.library.custom_op("radiance::gated", mutates_args=())
def gated(
    kind: str, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor | None, eps: float, backend: str
) -> torch.Tensor:
    return implementation("gated", backend, x.device)(kind, x, gate, weight, eps)


@gated.register_fake
def _(kind, x, gate, weight, eps, backend):
    return _fake_act(x)


@torch.library.custom_op("radiance::gated_rotate_quant", mutates_args=())
def gated_rotate_quant(
    kind: str, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor | None, eps: float,
    pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, elem: str, granularity: str,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return implementation("gated_rotate_quant", backend, x.device)(
        kind, x, gate, weight, eps, pairs, theta, channel_scales, elem, granularity)


@gated_rotate_quant.register_fake
def _(kind, x, gate, weight, eps, pairs, theta, channel_scales, elem, granularity, backend):
    return fake_outputs(x, pairs, elem, granularity)
