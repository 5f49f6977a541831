"""Minimal writer of rotated tiny checkpoints (ParoQuant int4 / int5) from a float HF checkpoint.

A stand-in until radiance-quant's tiny-format writers land; built only from radiance-kernels' formats.
Each linear of the decoder layers gets random valid rotation records (pairs, theta, channel_scales)
and weights ``Wr = W · diag(1/cs) · Rᵀ`` quantized by ``awq.quantize_asym``, so that
``rotate(x) · dequant(Wr)ᵀ ≈ x · Wᵀ``. ``unquantized`` names module suffixes kept as plain weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantized_linears(state: dict[str, torch.Tensor], unquantized: tuple[str, ...] = ()) -> list[str]:
    names = []
    for key in state:
        module = key.removesuffix(".weight")
        if key.endswith(".weight") and module.split(".")[-1] in LINEARS and not module.endswith(unquantized or ("\0",)):
            names.append(module)
    return sorted(names)


def write_paroquant(src: Path, out: Path, bits: int = 4, krot: int = 8, seed: int = 0,
                    unquantized: tuple[str, ...] = ()) -> Path:
    from radiance_kernels.formats import awq
    from radiance_kernels.formats.rotation import dense_matrix, random_rotation

    src, out = Path(src), Path(out)
    state = {}
    for f in sorted(src.glob("*.safetensors")):
        state.update(load_file(f))
    tensors = dict(state)
    for i, module in enumerate(quantized_linears(state, unquantized)):
        w = tensors.pop(module + ".weight").to(torch.float64)  # [N, K]
        pairs, theta, cs = random_rotation(w.shape[1], krot, seed=seed * 1000 + i)
        wr = (w / cs.to(torch.float64)) @ dense_matrix(pairs, theta).T
        codes, zeros, scales = awq.quantize_asym(wr.T.contiguous(), bits)
        for name, t in awq.to_checkpoint(codes, zeros, scales, bits).items():
            tensors[f"{module}.{name}"] = t
        tensors |= {f"{module}.pairs": pairs, f"{module}.theta": theta, f"{module}.channel_scales": cs}
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, out / f.name)
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors")
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "paroquant", "bits": bits, "group_size": 128, "krot": krot}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
