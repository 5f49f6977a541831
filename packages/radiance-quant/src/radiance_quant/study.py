"""Weight-error study: relRMS and dB per linear between checkpoints of one model in any stored format.

Every module is dequantised back to the base frame ``W0 [N, K]`` (fp64): ParoQuant int4/int5 and
MXFP4-PARO are un-rotated (``from_rotated``), NVFP4 / FP8 / MXFP4 are dequantised, dense weights are
taken as stored. ``relRMS = ||W - W_ref|| / ||W_ref||``, ``dB = -20·log10(relRMS)``. ``direct``
formats are computed on the fly from the reference with no rotation (RTN ``int4``/``int5`` g128,
``mxfp4-ocp``/``mxfp4-mse``): the seeds' "direct bf16 -> MXFP4" row.
"""

from __future__ import annotations

import math

import torch

from radiance_kernels.formats import awq, mx
from radiance_quant.build import dequant_tensors, quant_tensors
from radiance_quant.io import Checkpoint, CheckpointError
from radiance_quant.nvfp4 import dequantize_module
from radiance_quant.paroquant import from_rotated

DIRECT = ("int4", "int5", "mxfp4-ocp", "mxfp4-mse")


def load_weight(ck: Checkpoint, m: str) -> torch.Tensor:
    """Module `m` of any supported format -> W0 [N, K] fp64 in the base (un-rotated) frame."""
    rot = f"{m}.theta" in ck
    if f"{m}.qweight" in ck:
        keys = [k for k in ("qweight", "qzeros", "scales", "qweight_hi", "qzeros_hi") if f"{m}.{k}" in ck]
        wt = dequant_tensors({k: ck.get(f"{m}.{k}") for k in keys})
    elif f"{m}.weight_packed" in ck and ck.spec(f"{m}.weight_scale")[0] == torch.uint8:
        wt = mx.dequantize_mxfp4(ck.get(f"{m}.weight_packed"), ck.get(f"{m}.weight_scale")).to(torch.float64)
    else:
        if rot:
            raise CheckpointError(f"{ck.file_of(m + '.theta')}: tensor {m}.theta without a rotated weight")
        return dequantize_module(ck, m).to(torch.float64)
    if not rot:
        return wt
    return from_rotated(wt, ck.get(f"{m}.pairs"), ck.get(f"{m}.theta"), ck.get(f"{m}.channel_scales"))


def direct(w: torch.Tensor, fmt: str) -> torch.Tensor:
    """Reference weight [N, K] quantised with no rotation and dequantised (fp64)."""
    if fmt.startswith("mxfp4-"):
        return dequant_tensors(quant_tensors(w, "mxfp4", rule=fmt.split("-")[1]))
    codes, zeros, scales = awq.quantize_asym(w.T.to(torch.float32), int(fmt[3]))
    return awq.dequantize(codes, zeros, scales).T.to(torch.float64)


def layer_linears(ck: Checkpoint) -> list[str]:
    """Transformer-layer linears (2-D weights or quantized tensors under `.layers.N.`), plus lm_head."""
    out = set()
    for n in ck.names():
        for suffix in (".weight", ".qweight", ".weight_packed"):
            if n.endswith(suffix) and (".layers." in n or n.startswith("lm_head")) and len(ck.spec(n)[1]) == 2:
                out.add(n[: -len(suffix)])
    return sorted(out)


def study(reference, others: dict[str, str], direct_formats: tuple[str, ...] = ()) -> dict:
    """relRMS/dB of every common linear of `others` (label -> dir) and `direct_formats` vs `reference`."""
    for f in direct_formats:
        if f not in DIRECT:
            raise CheckpointError(f"unknown direct format {f!r}; expected one of {DIRECT}")
    ref = Checkpoint(reference)
    cks = {label: Checkpoint(d) for label, d in others.items()}
    mods = set(layer_linears(ref))
    for ck in cks.values():
        mods &= set(layer_linears(ck))
    if not mods:
        raise CheckpointError(f"{ref.dir}: no linear module common to all checkpoints")
    rows: dict[str, dict[str, float]] = {}
    sums: dict[str, list[float]] = {}
    from tqdm import tqdm

    for m in tqdm(sorted(mods), desc="study", unit="linear", disable=None):
        w0 = load_weight(ref, m)
        cands = {label: load_weight(ck, m) for label, ck in cks.items()}
        cands |= {f"direct-{f}": direct(w0, f) for f in direct_formats}
        rows[m] = {}
        for label, w in cands.items():
            if w.shape != w0.shape:
                raise CheckpointError(
                    f"{cks[label].dir if label in cks else ref.dir}: module {m}: shape "
                    f"{list(w.shape)} != reference {list(w0.shape)}"
                )
            rel = float((w - w0).norm() / w0.norm().clamp(min=1e-300))
            rows[m][label] = rel
            acc = sums.setdefault(label, [0.0, 0.0])
            acc[0] += float((w - w0).norm()) ** 2
            acc[1] += float(w0.norm()) ** 2
    summary = {label: {"rel_rms": math.sqrt(e / r), "db": db(math.sqrt(e / r))} for label, (e, r) in sums.items()}
    return {
        "reference": str(ref.dir),
        "others": {k: str(v) for k, v in others.items()},
        "direct": list(direct_formats),
        "per_tensor": rows,
        "overall": summary,
    }


def db(rel: float) -> float:
    return -20.0 * math.log10(rel) if rel > 0 else math.inf


def table(report: dict) -> str:
    """Plain-text table: one row per tensor, relRMS (dB) per candidate, then the pooled overall row."""
    labels = list(report["overall"])
    lines = ["tensor\t" + "\t".join(labels)]
    for m, row in report["per_tensor"].items():
        lines.append(m + "\t" + "\t".join(f"{row[lb]:.4f} ({db(row[lb]):.1f} dB)" for lb in labels))
    lines.append(
        "OVERALL\t"
        + "\t".join(f"{report['overall'][lb]['rel_rms']:.4f} ({report['overall'][lb]['db']:.1f} dB)" for lb in labels)
    )
    return "\n".join(lines)
