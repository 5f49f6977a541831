"""A/B section: the rotate+quant producer's named launch configs side by side in one process.

``producer_variants``: every config of ``stream.triton.CONFIGS`` (hardware e4m3 convert, as served; the
recompute configs only per-token, where they differ) and of the Gluon prefill kernel (``rotate_quant.gluon.CONFIGS``),
plus the Triton default config with the software e4m3 encoder, on ``rotate_quant`` at M = 8192, K = 5120, P = 1..3, for
e4m3 per-token, e4m3 per-group and int8 per-group. Inputs are DRAM-fed (round-robin copies past the L2).
Each row carries the streamed bytes (bf16 in + codes + scales + row sums; a scratch is not counted), their
rate as a fraction of ``ceil["copy_TBps"]``, and ``same_as_default``: whether its outputs equal the Triton
default config's byte for byte (the default itself is checked against the reference by the kernel tests).
"""

from __future__ import annotations

from functools import partial

import torch

from radiance_bench.kernelbench.cases import activations
from radiance_bench.kernelbench.timing import copies_needed, graph_time
from radiance_bench.kernelbench.variants import pick
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.rotate_quant import gluon as rg
from radiance_kernels.ops.rotate_quant import triton as rq
from radiance_kernels.ops.stream import triton as st

MODES = (("e4m3", "token"), ("e4m3", "group"), ("int8", "group"))
CONFIGS = {**st.CONFIGS, **rg.CONFIGS}  # the Triton kernel's configs, then the Gluon prefill kernel's


def _same(got: dict, want: dict) -> bool:
    return all(torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8)) for k in ("A", "AS", "RS"))


def producer_variants(record, results: list, ceil: dict, M: int = 8192, K: int = 5120,
                      names: list[str] | None = None) -> None:
    """``record(section, kernel, timing, **fields)`` writes a row; a variant that fails is recorded as an
    error row and the others still run. ``names`` restricts the configs (the default is always timed: it is
    the byte reference)."""
    xs = [activations(M, K, seed=i) for i in range(copies_needed(M * K * 2))]
    chosen = pick(CONFIGS, names)
    runs = [(st.DEFAULT, True)] + [(n, True) for n in chosen if n != st.DEFAULT] + [(st.DEFAULT, False)]
    for P in (1, 2, 3):
        rot = random_rotations(P, K, seed=P, device="cuda")
        for elem, gran in MODES:
            first = rq.rotate_quant(xs[0], *rot, elem, gran, hw=True, cfg=st.DEFAULT)
            for name, hw in runs:
                if (not hw and elem == "int8") or (gran == "group" and CONFIGS[name].get("scratch") is False):
                    continue  # int8 has no e4m3 convert; scratch/recompute differ in per-token mode only
                label = f"rotate_quant {elem} {gran} {name}{'' if hw else ' sw-e4m3'}"
                meta = {"M": M, "K": K, "P": P, "cfg": name, "hw": hw, **CONFIGS[name]}
                try:
                    out = rq.rotate_quant(xs[0], *rot, elem, gran, hw=hw, cfg=name)
                    same = _same(out, first)
                    nbytes = xs[0].nbytes + sum(t.nbytes for t in out.values())
                    del out
                    t = graph_time([partial(rq.rotate_quant, x, *rot, elem, gran, hw=hw, cfg=name) for x in xs],
                                   min_calls=8)
                except Exception as exc:  # noqa: BLE001 - a variant that fails is recorded, the others still run
                    results.append({"section": "producer_variants", "kernel": label, **meta,
                                    "error": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                tbps = nbytes / (t.best_us * 1e-6) / 1e12
                record("producer_variants", label, t, **meta, bytes=nbytes, TBps=tbps,
                       frac_copy=tbps / ceil["copy_TBps"], same_as_default=same)
            del first
