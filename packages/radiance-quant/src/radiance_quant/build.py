"""Builders of rotated checkpoints from a bf16/fp32 base: ParoQuant int4, int5 (bit-plane), MXFP4-PARO.

Each quantized linear ``W0 [N, K]`` is taken to the rotated frame ``W^T = (W0 / cs) @ R^T`` in fp64
(see :mod:`radiance_quant.paroquant`) with the rotation records of a ParoQuant checkpoint (the trained
rotations and channel scales) or, for tiny test models, `radiance_kernels` random ones, then:

- ``int4`` / ``int5``: asymmetric RTN group-128 (``awq.quantize_asym``, ParoQuant's grid), stored as
  ``qweight/qzeros/scales`` (+ ``qweight_hi/qzeros_hi`` for int5); config
  ``{"quant_method": "paroquant", "bits": 4|5, "group_size": 128, "krot": 8}``. ``pow2=True`` rounds
  the scales up to powers of two (measured 2.8x worse KL in the seeds; kept as an option).
- ``mxfp4``: ``weight_packed [N, K/2]`` uint8 + ``weight_scale [N, K/32]`` uint8 e8m0 (``mx.quantize_mxfp4``,
  rule ``ocp`` or ``mse``); config ``{"quant_method": "paroquant_mxfp4", "group_size": 128, "krot": 8}``.

Every format also stores ``theta``, ``pairs``, ``channel_scales``. Other tensors are copied unchanged.
"""

from __future__ import annotations

import re
import time

import torch

from radiance_kernels.formats import awq, mx, rotation
from radiance_quant.io import Checkpoint, CheckpointError, Job, run_units, units
from radiance_quant.paroquant import GROUP, linears, quant_config, row_chunk, to_rotated

FORMATS = ("int4", "int5", "mxfp4")
KROT = 8
#: 2-D layer weights that stay unquantized (routers, GDN in_proj_a/b, as z-lab's checkpoints do).
SKIP = re.compile(r"(mlp\.gate|shared_expert_gate|in_proj_ba|in_proj_a|in_proj_b)\.weight$")


def targets(base: Checkpoint, keep: str | None = None) -> list[str]:
    """Layer linears of `base` to quantize: 2-D float `.layers.N.*.weight`, K % 128 == 0, N % 32 == 0, and no
    match of the regex `keep` (modules left in the base dtype)."""
    out = []
    for n in base.names():
        dt, sh = base.spec(n)
        if (
            ".layers." in n
            and n.endswith(".weight")
            and len(sh) == 2
            and dt.is_floating_point
            and not SKIP.search(n)
            and not (keep and re.search(keep, n))
            and sh[1] % GROUP == 0
            and sh[0] % 32 == 0
        ):
            out.append(n[: -len(".weight")])
    return out


def quant_tensors(wt: torch.Tensor, fmt: str, pow2: bool = False, rule: str = "mse") -> dict[str, torch.Tensor]:
    """Rotated-frame weight W^T [N, K] -> the format's stored tensors (without the rotation records)."""
    if fmt == "mxfp4":
        packed, scales = mx.quantize_mxfp4(wt.to(torch.float32), rule=rule)
        return {"weight_packed": packed, "weight_scale": scales}
    bits = {"int4": 4, "int5": 5}[fmt]
    codes, zeros, scales = awq.quantize_asym(wt.T.to(torch.float32), bits, GROUP, pow2=pow2)
    return awq.to_checkpoint(codes, zeros, scales, bits)


def dequant_tensors(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """Inverse of :func:`quant_tensors`: rotated-frame W^T [N, K] fp64."""
    if "weight_packed" in t:
        return mx.dequantize_mxfp4(t["weight_packed"], t["weight_scale"]).to(torch.float64)
    codes, zeros, scales, _ = awq.from_checkpoint(t)
    return awq.dequantize(codes, zeros, scales).T.to(torch.float64)


def build(base_dir, out_dir, fmt: str, rotations=None, seed: int = 0, pow2: bool = False, rule: str = "mse",
          keep: str | None = None) -> dict:
    """Build a rotated `fmt` checkpoint from `base_dir` into `out_dir` (resumable, atomic); returns the report.

    `rotations`: a ParoQuant checkpoint dir whose theta/pairs/channel_scales are used (and whose
    quantized modules define what is quantized); None = random rotations from `seed` (tiny models).
    `keep`: with random rotations, a regex of weight names left unquantized besides the routers and GDN in_proj_a/b.
    """
    if fmt not in FORMATS:
        raise CheckpointError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    if pow2 and fmt == "mxfp4":
        raise CheckpointError("pow2 scales apply to int4/int5 only (MXFP4 scales are powers of two already)")
    t0 = time.perf_counter()
    base = Checkpoint(base_dir)
    rot = Checkpoint(rotations) if rotations is not None else None
    if rot is not None and keep is not None:
        raise CheckpointError("keep applies to random rotations; with `rotations` the quantized modules are its own")
    if rot is not None:
        qc = quant_config(rot)
        krot = qc["krot"]
        mods = linears(rot)
        for m in mods:
            if f"{m}.weight" not in base:
                raise CheckpointError(f"{base.dir}: missing tensor {m}.weight (quantized in {rot.dir})")
    else:
        krot, mods = KROT, targets(base, keep)

    def records(m: str, K: int):
        if rot is None:
            return rotation.random_rotation(K, krot, seed * 1_000_003 + index[m])
        p = f"{m}.channel_scales"
        r = [
            rot.get(f"{m}.pairs", torch.int16, (krot, K)),
            rot.get(f"{m}.theta", torch.float16, (krot, K // 2)),
            rot.get(p, torch.float16, (1, K)),
        ]
        try:
            rotation.validate_rotation(*r, name=m)
        except ValueError as e:
            raise CheckpointError(f"{rot.file_of(p)}: {e}") from None
        return r

    figures: dict[str, dict] = {}
    index = {m: i for i, m in enumerate(mods)}
    for m in mods:  # check every input before the output directory is touched
        dt, sh = base.spec(f"{m}.weight")
        if len(sh) != 2 or not dt.is_floating_point or sh[1] % GROUP or sh[0] % 32:
            raise CheckpointError(
                f"{base.file_of(m + '.weight')}: tensor {m}.weight: expected a float [N, K] "
                f"with K % 128 == 0 and N % 32 == 0, got {dt} {list(sh)}"
            )
        if rot is not None:
            records(m, sh[1])

    def convert(unit: str, names: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for n in names:
            m = n[: -len(".weight")] if n.endswith(".weight") else None
            if m not in index:
                out[n] = base.get(n)
                continue
            w0 = base.get(n)
            N, K = w0.shape
            pairs, theta, cs = records(m, K)
            parts, err2, ref2 = [], 0.0, 0.0
            for rows in w0.split(row_chunk(K)):  # rows are independent in every format: bounded temporaries
                wt = to_rotated(rows, pairs, theta, cs)
                parts.append(quant_tensors(wt, fmt, pow2, rule))
                err2 += float((dequant_tensors(parts[-1]) - wt).norm()) ** 2
                ref2 += float(wt.norm()) ** 2
            dim = 0 if fmt == "mxfp4" else 1  # int formats store [K, N]-oriented tensors
            out |= {f"{m}.{k}": torch.cat([p[k] for p in parts], dim=dim) for k in parts[0]}
            figures[m] = {"N": N, "K": K, "rel_rms": (err2 / max(ref2, 1e-300)) ** 0.5}
            out |= {f"{m}.theta": theta, f"{m}.pairs": pairs, f"{m}.channel_scales": cs}
        return out

    plan = units(base.names())
    fingerprint = {
        "tool": f"build-{fmt}",
        "format_version": 1,
        "base": base.fingerprint(),
        "rotations": rot.fingerprint() if rot is not None else f"random:{seed}",
        "pow2": pow2,
        "rule": rule if fmt == "mxfp4" else None,
        **({"keep": keep} if keep else {}),  # absent by default: earlier builds keep their fingerprint
    }
    job = Job(out_dir, fingerprint, list(plan))
    written = run_units(job, plan, convert, f"build {fmt}")
    if fmt == "mxfp4":
        qconf = {"quant_method": "paroquant_mxfp4", "group_size": GROUP, "krot": krot}
    else:
        qconf = {"quant_method": "paroquant", "bits": int(fmt[3]), "group_size": GROUP, "krot": krot}
    config = dict(base.config) | {"quantization_config": qconf}
    report = {
        "tool": f"build-{fmt}",
        "base": str(base.dir),
        "rotations": str(rot.dir) if rot else f"random:{seed}",
        "pow2": pow2,
        "rule": rule if fmt == "mxfp4" else None,
        "quantization_config": qconf,
        "units_written": written,
        "units_resumed": [u for u in plan if u not in written],
        "linears": figures,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    job.finish(config, base.dir, report)
    return report
