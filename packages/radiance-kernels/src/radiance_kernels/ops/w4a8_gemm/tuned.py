"""Tile configs chosen per GPU and GEMM shape from a committed bench run: serving never autotunes.

``tuned/<gpu>.json`` (``<gpu>`` = :func:`gpu_key` of ``torch.cuda.get_device_name()``) holds, per op and
band, the named config (of ``triton.DECODE`` / ``triton.PREFILL``) that won the bench's side-by-side A/B
on that GPU for each (N, K) and M range::

    {"gpu": "NVIDIA H200", "source": "<bench JSON files>",
     "w4a8_gemm": {"decode": [{"N": 14336, "K": 5120, "M_max": 1, "config": "nib8x"}, ...],
                   "prefill": [...]}}

An entry serves ``M <= M_max`` (``null``: any M) for its exact (N, K) and its activation element ``act`` ("e4m3" /
"int8") and weight ``bits`` (4 / 5) — absent keys mean e4m3 and 4, the formats the first tables were measured in; the
first match in ascending ``M_max`` wins. Entries with ``"defer": true`` were timed as the GEMM leaving its split
partials to the producer that reads them (the bench's ``decode_pairs``: the pair in one graph) and serve only that form
(``w4a8_gemm_partials``); that form takes the reduced entries where no deferred one covers its M. A ``defer`` entry
marked ``"reduced": true`` names the reduced config whose pair was faster than any deferred one (the GEMM sums its
splits in the kernel and hands that fp32 sum as the one partial: the same bits). A GPU, op, band or shape without an
entry runs the band's named default. The table is written by ``python -m radiance_bench.kernelbench.tune`` from
``decode_variants`` / ``decode_pairs`` / ``prefill_variants`` results; names it holds are checked against the kernel's
configs when it loads (a renamed config fails loudly, not by falling back).
"""

from __future__ import annotations

import json
import re
import warnings
from functools import cache
from pathlib import Path

TABLES = Path(__file__).with_name("tuned")
_REQUIRED, _OPTIONAL = {"N", "K", "M_max", "config"}, {"act", "bits", "defer", "reduced"}


def gpu_key(name: str) -> str:
    """"NVIDIA H200" → "nvidia-h200": the table's file stem."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def path(gpu: str) -> Path:
    """Where the tuned table of ``gpu`` (a device name) is committed, or would be."""
    return TABLES / f"{gpu_key(gpu)}.json"


@cache
def table(gpu: str) -> dict:
    """The tuned table of ``gpu`` (a device name), validated; {} when none is committed (warned once per GPU)."""
    from radiance_kernels.ops.w4a8_gemm.triton import DECODE, PREFILL

    file = path(gpu)
    if not file.exists():
        warnings.warn(f"radiance-kernels: no tuned table for {gpu!r} ({file.name}): the W4A8 GEMMs run each band's "
                      f"named default config, not a measured pick (tools/device/retune.sh builds a table)",
                      stacklevel=2)
        return {}
    data = json.loads(file.read_text())
    names = {"decode": DECODE, "prefill": PREFILL}
    for op, bands in data.items():
        if op in ("gpu", "source"):
            continue
        for band, entries in bands.items():
            if band not in names:
                raise ValueError(f"{file}: {op} band {band!r} is not one of {sorted(names)}")
            for e in entries:
                if not _REQUIRED <= e.keys() <= _REQUIRED | _OPTIONAL or e["config"] not in names[band] \
                        or e.get("defer", False) not in (False, band == "decode") \
                        or e.get("reduced", False) not in (False, e.get("defer", False)):
                    raise ValueError(f"{file}: {op} {band} entry {e} must have keys N, K, M_max, config (and "
                                     f"optionally act, bits, defer — decode only —, reduced — defer entries "
                                     f"only) with config one of {sorted(names[band])}")
    return data


def pick(gpu: str, op: str, band: str, M: int, N: int, K: int, act: str = "e4m3", bits: int = 4,
         defer: bool = False) -> str | None:
    """The tuned config name for this GEMM on ``gpu`` (``defer``: leaving its split partials), or None (run the
    band's default)."""
    e = entry(gpu, op, band, M, N, K, act, bits, defer)
    return None if e is None else e["config"]


def entry(gpu: str, op: str, band: str, M: int, N: int, K: int, act: str = "e4m3", bits: int = 4,
          defer: bool = False) -> dict | None:
    """The table entry :func:`pick` takes its name from (its ``reduced`` mark with it), or None."""
    shape = [e for e in table(gpu).get(op, {}).get(band, [])
             if (e["N"], e["K"], e.get("act", "e4m3"), e.get("bits", 4)) == (N, K, act, bits)]
    for form in (True, False)[not defer:]:  # the deferred entries first where they cover M
        entries = sorted((e for e in shape if e.get("defer", False) == form),
                         key=lambda e: float("inf") if e["M_max"] is None else e["M_max"])
        if hit := next((e for e in entries if e["M_max"] is None or e["M_max"] >= M), None):
            return hit
    return None


if __name__ == "__main__":  # the device scripts' lookup: this machine's GPU's table path
    import torch

    print(path(torch.cuda.get_device_name()))
