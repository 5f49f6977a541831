"""Export a trained drafter for serving: bf16, or FP8 (e4m3) with one scale per 128×128 weight block.

FP8 layout (vLLM's ``fp8`` method with ``weight_block_size``): every linear weight ``W`` [N, K] becomes
``weight`` float8_e4m3fn [N, K] and ``weight_scale_inv`` float32 [ceil(N/128), ceil(K/128)] with
``W ≈ weight · weight_scale_inv`` blockwise; scale = block amax / 448 (1 for an all-zero block), codes from
the radiance e4m3 codec (RNE, saturating). Norm weights stay bf16.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from radiance_drafter.model import load_drafter, save_drafter, write_json
from radiance_kernels.formats import e4m3

BLOCK = 128
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [BLOCK, BLOCK]}


def quantize_fp8_block(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """W [N, K] → (codes float8_e4m3fn [N, K], scale_inv float32 [ceil(N/128), ceil(K/128)])."""
    n, k = w.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    padded = torch.zeros(nb * BLOCK, kb * BLOCK, dtype=torch.float32)
    padded[:n, :k] = w.float()
    blocks = padded.view(nb, BLOCK, kb, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / e4m3.E4M3_MAX, torch.ones_like(amax))
    codes = e4m3.encode(blocks / scale[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)[:n, :k]
    return codes.contiguous().view(torch.float8_e4m3fn), scale


def dequantize_fp8_block(codes: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_fp8_block` (float32)."""
    n, k = codes.shape
    full = scale_inv.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    return e4m3.decode(codes.view(torch.uint8)) * full


def export(drafter_dir: str | Path, out_dir: str | Path, fmt: str) -> Path:
    """Write the drafter in ``fmt`` ("bf16" or "fp8") to ``out_dir`` (config.json + model.safetensors)."""
    model = load_drafter(drafter_dir)
    out = Path(out_dir)
    if fmt == "bf16":
        return save_drafter(model, out, torch.bfloat16)
    if fmt != "fp8":
        raise ValueError(f"unknown export format {fmt!r} (bf16 or fp8)")
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, t in model.state_dict().items():
        if t.dim() == 2:
            codes, scale = quantize_fp8_block(t)
            tensors[name] = codes
            tensors[name.removesuffix("weight") + "weight_scale_inv"] = scale
        else:
            tensors[name] = t.to(torch.bfloat16).contiguous()
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    write_json(out / "config.json", {**model.cfg.to_hf("bfloat16"), "quantization_config": FP8_CONFIG})
    return out
