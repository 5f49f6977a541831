"""Independent reference forward of a rotated checkpoint: transformers with the dequantized weights and
the served activation quantization simulated from the format specs (no radiance op is called).

Each quantized linear computes ``y = bf16(Q(rotate(x)) · dequant(W)ᵀ)`` where rotate is
``formats.rotation.rotate`` and Q quantizes per token or per 128-group to e4m3 / int8 with
``scale = amax · fp32(1/QMAX)`` (e4m3 via ``formats.e4m3``), then dequantizes; the GEMM output is rounded
to bf16 as the kernels' output is. ``act`` is ``(element, granularity)``, or ``(element, granularity,
decode element)`` for ``RADIANCE_PQ_DECODE_ACT``: a call on at most ``DECODE_MAX_M`` rows quantizes to the decode
element (the plugin chooses per call by its row count the same way); ``act=None`` simulates no activation
quantization (weight-only).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

QMAX = {"e4m3": 448.0, "int8": 127.0}


def fake_quant(x: torch.Tensor, elem: str, granularity: str) -> torch.Tensor:
    from radiance_kernels.formats import e4m3

    M, K = x.shape
    g = x.reshape(M, K // 128, 128)
    amax = g.abs().amax(-1, keepdim=True)
    if granularity == "token":
        amax = amax.amax(-2, keepdim=True).expand_as(amax)
    scale = amax * torch.tensor(1.0 / QMAX[elem], dtype=torch.float32)
    q = torch.where(scale > 0, g / torch.where(scale > 0, scale, 1.0), 0.0)
    codes = e4m3.decode(e4m3.encode(q)) if elem == "e4m3" else torch.round(q).clamp(-127, 127)
    return (codes.to(torch.float64) * scale.to(torch.float64)).reshape(M, K)


class SimLinear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, rotation, act: tuple[str, ...] | None, bias=None):
        super().__init__()
        self.weight64 = weight.to(torch.float64)  # [N, K] dequantized
        self.rotation = rotation
        self.act = act
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from radiance_kernels.formats.rotation import rotate

        x2 = x.reshape(-1, x.shape[-1])
        xr = rotate(x2, *self.rotation) if self.rotation is not None else x2.to(torch.float32)
        xq = fake_quant(xr, *_element(self.act, x2.shape[0])) if self.act else xr.to(torch.float64)
        y = (xq @ self.weight64.T).to(torch.bfloat16).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], -1)


def _element(act: tuple[str, ...], rows: int) -> tuple[str, str]:
    """(element, granularity) of a call on ``rows`` tokens."""
    from radiance_kernels.ops.w4a8_gemm import DECODE_MAX_M

    elem, granularity, *decode = act
    return (decode[0] if decode and rows <= DECODE_MAX_M else elem), granularity


def dequantized_linears(model_dir: Path) -> dict[str, tuple[torch.Tensor, tuple | None]]:
    """{module: (W [N, K] fp32, (pairs, theta, channel_scales) or None)} for every quantized module
    (ParoQuant int4/int5, MXFP4-PARO, and plain MXFP4 = no rotation)."""
    from radiance_kernels.formats import awq

    state = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(f))
    out = {}
    for key in state:
        if key.endswith(".qweight"):
            m = key.removesuffix(".qweight")
            t = {k: state[f"{m}.{k}"] for k in ("qweight", "qzeros", "scales", "qweight_hi", "qzeros_hi")
                 if f"{m}.{k}" in state}
            codes, zeros, scales, _ = awq.from_checkpoint(t)
            w = awq.dequantize(codes, zeros, scales).T.contiguous()
            out[m] = (w, (state[f"{m}.pairs"], state[f"{m}.theta"], state[f"{m}.channel_scales"]))
        elif key.endswith(".weight_packed"):
            from radiance_kernels.formats.mx import dequantize_mxfp4

            m = key.removesuffix(".weight_packed")
            w = dequantize_mxfp4(state[key], state[f"{m}.weight_scale"])
            rotated = f"{m}.pairs" in state
            out[m] = (w, (state[f"{m}.pairs"], state[f"{m}.theta"], state[f"{m}.channel_scales"]) if rotated else None)
    return out


def load_reference(model_dir: Path, act: tuple[str, ...] | None, dtype: torch.dtype = torch.float32):
    """A transformers causal LM of ``model_dir`` whose quantized linears are :class:`SimLinear`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_dir = Path(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    quant = dequantized_linears(model_dir)
    plain = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        plain.update({k: v for k, v in load_file(f).items() if k.rsplit(".", 1)[0] not in quant})
    missing, _ = model.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in plain.items()},
                                       strict=False)
    for module, (w, rot) in quant.items():
        parent, _, leaf = module.rpartition(".")
        old = model.get_submodule(module)
        setattr(model.get_submodule(parent), leaf, SimLinear(w, rot, act, old.bias))
    left = [k for k in missing if k.rsplit(".", 1)[0] not in quant]
    if left:
        raise ValueError(f"{model_dir}: reference model is missing {left[:5]}")
    return model.eval()
