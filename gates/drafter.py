"""Drafter gate: the DFlash loop on the tiny target (capture → train → held-out offline proxy), and the
trained drafter's bf16 export loading in vLLM's own ``dflash`` model class."""

from __future__ import annotations

import json
import os

import torch

from gates.core import Row
from gates.serve import tiny_model
from radiance_drafter import tinyloop
from radiance_drafter.export import export
from radiance_drafter.vllm_check import check_vllm_load
from radiance_quant.tiny import corpus

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
    old = os.environ.get("VLLM_PLUGINS")
    os.environ["VLLM_PLUGINS"] = ""  # the drafter is unquantised: load it with vLLM alone
    try:
        info = check_vllm_load(work / "bf16", target)
    finally:
        if old is None:
            os.environ.pop("VLLM_PLUGINS")
        else:
            os.environ["VLLM_PLUGINS"] = old
    cls = info["model_class"].rsplit(".", 1)[-1]
    figure = f"{cls}, {info['checkpoint_tensors']} tensors"
    rows.append(Row("drafter: bf16 export loads in vLLM's dflash loader", figure,
                    "DFlash class, no missing/unexpected keys", cls.startswith("DFlash")))
    return rows


def gates(ctx):
    yield "drafter tiny loop", lambda: _loop(ctx)
