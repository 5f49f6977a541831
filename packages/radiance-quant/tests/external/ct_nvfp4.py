"""Run llm-compressor's `oneshot` (NVFP4 and MXFP4 schemes) on CPU and capture compressed-tensors' own
dequantisation of what it wrote.

Runs in a throwaway venv holding llmcompressor + compressed-tensors 0.19 (they conflict with vLLM's
pinned compressed-tensors 0.17); see test_external.py. argv: BASE_DIR WORK_DIR. Writes
WORK_DIR/ct_NVFP4, WORK_DIR/ct_MXFP4 and WORK_DIR/ct_capture.pt = {scheme: {module: W fp32}}.
"""

import json
import sys
from pathlib import Path

import torch
from compressed_tensors.compressors.mx_utils import decompress_mx_scale
from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import dequantize
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    base, work = Path(sys.argv[1]), Path(sys.argv[2])
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 512, (8, 64), generator=gen)
    ds = Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})
    capture = {}
    for scheme in ("NVFP4", "MXFP4"):
        out = work / f"ct_{scheme}"
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        oneshot(
            model=model,
            tokenizer=AutoTokenizer.from_pretrained(base),
            dataset=ds,
            recipe=QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"]),
            num_calibration_samples=8,
            max_seq_length=64,
            output_dir=str(out),
            pipeline="basic",
        )
        qc = json.loads((out / "config.json").read_text())["quantization_config"]
        args = QuantizationArgs(**next(iter(qc["config_groups"].values()))["weights"])
        t = {}
        for f in out.glob("*.safetensors"):
            with safe_open(f, "pt") as fh:
                t |= {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a dict)
        capture[scheme] = {}
        for name in sorted(k for k in t if k.endswith(".weight_packed")):
            m = name.removesuffix(".weight_packed")
            packed = t[name]
            q = unpack_fp4_from_uint8(packed, packed.shape[0], packed.shape[1] * 2, dtype=torch.float32)
            if scheme == "NVFP4":
                w = dequantize(
                    x_q=q,
                    scale=t[f"{m}.weight_scale"].to(torch.float32),
                    args=args,
                    global_scale=t[f"{m}.weight_global_scale"],
                    dtype=torch.float32,
                )
            else:
                w = dequantize(
                    x_q=q,
                    scale=decompress_mx_scale(t[f"{m}.weight_scale"]).to(torch.float32),
                    args=args,
                    dtype=torch.float32,
                )
            capture[scheme][m] = w
    torch.save(capture, work / "ct_capture.pt")
    print(f"ct: {', '.join(f'{k} {len(v)} linears' for k, v in capture.items())}")


if __name__ == "__main__":
    main()
