"""The activation quantizers' own KL on the tiny int4 checkpoint, per served activation setting (CPU, no server).

``python tools/act_quant_kl.py [OUT.json]``: builds the tiny Qwen3 and its int4 checkpoint (seed 0, as the gates do),
then over ``served_checks.PROMPTS`` and ``served_formats.LONG_PROMPT`` (each continued 24 tokens greedily by the
weight-only reference) the mean over positions of KL(weight-only reference ‖ reference with the setting's simulated
activation quantization) — e4m3 and int8 per-group, and the per-call mix ``RADIANCE_PQ_DECODE_ACT=int8`` with e4m3
past the decode band — printed per prompt and written as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from radiance_quant.tiny import build_tiny_qwen3
from radiance_vllm.served_checks import PROMPTS, kl, reference_greedy, reference_logprobs
from radiance_vllm.served_formats import FORMATS, LONG_PROMPT
from radiance_vllm.sim_reference import load_reference

SETTINGS = {"e4m3 group": ("e4m3", "group"), "int8 group": ("int8", "group"),
            "e4m3 group, int8 in the decode band": ("e4m3", "group", "int8")}


def main(out: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, _ = FORMATS["int4"].build(build_tiny_qwen3(Path(tmp) / "tiny", seed=0), Path(tmp) / "int4")
        tok = AutoTokenizer.from_pretrained(ckpt)
        weight_only = load_reference(ckpt, None)
        refs = {name: load_reference(ckpt, act) for name, act in SETTINGS.items()}
        rows = []
        for prompt in (*PROMPTS, LONG_PROMPT):
            ids = tok(prompt)["input_ids"]
            full = ids + reference_greedy(weight_only, ids, 24)
            base = reference_logprobs(weight_only, full)
            rows.append({"prompt_tokens": len(ids), **{name: kl(base, reference_logprobs(m, full))
                                                       for name, m in refs.items()}})
    result = {"rows": rows, "mean": {name: sum(r[name] for r in rows) / len(rows) for name in SETTINGS}}
    print(f"{'prompt tokens':>13} " + " ".join(f"{name:>38}" for name in SETTINGS))
    for r in [*rows, {"prompt_tokens": "mean", **result["mean"]}]:
        print(f"{r['prompt_tokens']!s:>13} " + " ".join(f"{r[name]:>38.2e}" for name in SETTINGS))
    if out:
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main(*sys.argv[1:2])
