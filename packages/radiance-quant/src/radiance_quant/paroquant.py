"""ParoQuant checkpoints (z-lab's int4 format as published, and our int5 bit-plane variant): verify.

Per quantized linear with input K, output N, g = 128, krot = 8 (radiance_kernels.formats.awq/rotation):
``qweight [K, N/8]`` int32 (AWQ nibble order), ``qzeros [K/g, N/8]`` int32, ``scales [K/g, N]`` fp16,
``theta [krot, K/2]`` fp16, ``pairs [krot, K]`` int16, ``channel_scales [1, K]`` fp16; int5 adds
``qweight_hi [K, N/32]`` and ``qzeros_hi [K/g, N/32]`` int32. The linear computes
``y = rotate(x) @ W``, ``W [K, N] = (q - z)·s``, ``rotate(x) = (x·channel_scales) @ R^T``. Hence a base
weight ``W0 [N, K]`` maps to ``W = R·diag(1/cs)·W0^T`` (:func:`to_rotated`) and back by
``W0 = (W^T @ R)·cs`` (:func:`from_rotated`).
"""

from __future__ import annotations

import torch

from radiance_kernels.formats import awq, mx, rotation
from radiance_quant.io import Checkpoint, CheckpointError

GROUP = 128
QUANT_TENSORS = ("qweight", "qzeros", "scales", "theta", "pairs", "channel_scales")
CHUNK_ELEMS = 1 << 20  # fp64 temporaries of the row-chunked paths stay ~8 MB each


def row_chunk(K: int) -> int:
    """Rows per chunk for input width K: a multiple of 32 (int5 bit planes), >= 32."""
    return max(32, CHUNK_ELEMS // K // 32 * 32)


def to_rotated(w0: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
    """Base weight W0 [N, K] -> rotated frame W^T [N, K] = (W0 / cs) @ R^T, fp64, in row chunks."""
    ones = torch.ones_like(cs)
    csd = cs.to(torch.float64).reshape(-1)
    chunks = w0.split(row_chunk(w0.shape[1]))
    return torch.cat([rotation.rotate(c.to(torch.float64) / csd, pairs, theta, ones, torch.float64) for c in chunks])


def from_rotated(wt: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
    """Rotated W^T [N, K] -> base frame W0 = (W^T @ R)·cs, fp64 (inverse layers: reversed, -theta)."""
    ones = torch.ones_like(cs)
    inv_p, inv_t = pairs.flip(0), (-theta).flip(0)
    csd = cs.to(torch.float64).reshape(-1)
    chunks = wt.split(row_chunk(wt.shape[1]))
    return torch.cat([rotation.rotate(c.to(torch.float64), inv_p, inv_t, ones, torch.float64) * csd for c in chunks])


def quant_config(ck: Checkpoint) -> dict:
    """The checkpoint's ParoQuant quantization_config, checked (quant_method, bits, group_size, krot)."""
    qc = ck.config.get("quantization_config")
    where = ck.dir / "config.json"
    method = qc.get("quant_method") if isinstance(qc, dict) else qc
    if method not in ("paroquant", "paroquant_mxfp4"):
        raise CheckpointError(
            f"{where}: quantization_config.quant_method is not 'paroquant'/'paroquant_mxfp4' ({method!r})"
        )
    bits_ok = qc.get("bits") in (4, 5) if method == "paroquant" else "bits" not in qc
    if not bits_ok or qc.get("group_size") != GROUP or not isinstance(qc.get("krot"), int):
        raise CheckpointError(
            f"{where}: quantization_config needs group_size 128, integer krot and bits 4|5 ('paroquant') or no bits "
            f"('paroquant_mxfp4'); got {qc}"
        )
    return qc


def weight_tensor(qc: dict) -> str:
    """The per-module tensor marking a quantized linear: `qweight` (int4/int5) or `weight_packed` (MXFP4)."""
    return "weight_packed" if qc["quant_method"] == "paroquant_mxfp4" else "qweight"


def linears(ck: Checkpoint, qc: dict | None = None) -> list[str]:
    """Module names that store the format's weight tensor."""
    tail = "." + weight_tensor(qc or quant_config(ck))
    return sorted(n[: -len(tail)] for n in ck.names() if n.endswith(tail))


def unquantized(ck: Checkpoint) -> dict[str, str]:
    """2-D floating `*.weight` tensors kept in the model dtype (lm_head, embeddings, GDN in_proj_a/b, ...)."""
    out = {}
    for n in ck.names():
        dt, sh = ck.spec(n)
        if n.endswith(".weight") and len(sh) == 2 and dt.is_floating_point:
            out[n[: -len(".weight")]] = str(dt).removeprefix("torch.")
    return out


def read_linear(ck: Checkpoint, prefix: str, qc: dict) -> dict[str, torch.Tensor]:
    """Read one linear's tensors, checking every dtype and shape against the one implied by the weight."""
    bits, krot = qc.get("bits"), qc["krot"]
    rot = lambda K: {  # noqa: E731
        "theta": (torch.float16, (krot, K // 2)),
        "pairs": (torch.int16, (krot, K)),
        "channel_scales": (torch.float16, (1, K)),
    }
    if bits is None:
        _, (N, K2) = ck.spec(f"{prefix}.weight_packed")
        if (2 * K2) % GROUP:
            raise CheckpointError(
                f"{ck.file_of(prefix + '.weight_packed')}: tensor {prefix}.weight_packed: "
                f"K={2 * K2} must be a multiple of {GROUP}"
            )
        expect = {"weight_packed": (torch.uint8, (N, K2)), "weight_scale": (torch.uint8, (N, 2 * K2 // 32))}
        return {k: ck.get(f"{prefix}.{k}", dt, sh) for k, (dt, sh) in (expect | rot(2 * K2)).items()}
    _, ssh = ck.spec(f"{prefix}.scales")
    _, qsh = ck.spec(f"{prefix}.qweight")
    if len(ssh) != 2 or len(qsh) != 2:
        raise CheckpointError(f"{ck.file_of(prefix + '.scales')}: tensor {prefix}.scales/qweight must be 2-D")
    K, N = qsh[0], ssh[1]
    if K % GROUP or N % 8:
        raise CheckpointError(
            f"{ck.file_of(prefix + '.qweight')}: tensor {prefix}.qweight: K={K} must be a "
            f"multiple of {GROUP} and N={N} of 8"
        )
    expect = {
        "qweight": (torch.int32, (K, N // 8)),
        "qzeros": (torch.int32, (K // GROUP, N // 8)),
        "scales": (torch.float16, (K // GROUP, N)),
    } | rot(K)
    hi = [f"{prefix}.qweight_hi", f"{prefix}.qzeros_hi"]
    if bits == 5:
        expect |= {"qweight_hi": (torch.int32, (K, N // 32)), "qzeros_hi": (torch.int32, (K // GROUP, N // 32))}
    elif any(h in ck for h in hi):
        raise CheckpointError(
            f"{ck.file_of(prefix + '.qweight')}: tensor {prefix}.qweight_hi present but quantization_config.bits is 4"
        )
    return {k: ck.get(f"{prefix}.{k}", dt, sh) for k, (dt, sh) in expect.items()}


def dequant_linear(file, prefix: str, t: dict[str, torch.Tensor], bits: int | None) -> torch.Tensor:
    """Checked dequantisation of one linear's stored weight -> W [K, N] fp64 (rotated frame)."""
    if bits is None:
        if (t["weight_scale"] == 255).any():
            raise CheckpointError(
                f"{file}: tensor {prefix}.weight_scale: {int((t['weight_scale'] == 255).sum())} NaN (255) e8m0 scales"
            )
        return mx.dequantize_mxfp4(t["weight_packed"], t["weight_scale"]).T.to(torch.float64)
    s = t["scales"].float()
    if not torch.isfinite(s).all() or (s <= 0).any():
        raise CheckpointError(
            f"{file}: tensor {prefix}.scales: {int((~torch.isfinite(s) | (s <= 0)).sum())} "
            "non-finite or non-positive scales"
        )
    codes, zeros, scales, got_bits = awq.from_checkpoint(t)
    qmax = 2**bits - 1
    if got_bits != bits or int(codes.max()) > qmax or int(zeros.max()) > qmax:
        raise CheckpointError(f"{file}: tensor {prefix}.qzeros: codes/zeros exceed {qmax} for bits={bits}")
    return awq.dequantize(codes, zeros, scales).to(torch.float64)


def check_linear(
    ck: Checkpoint,
    prefix: str,
    t: dict[str, torch.Tensor],
    bits: int | None,
    rng: torch.Generator,
    base: Checkpoint | None,
    groups: int = 4,
) -> dict:
    """Value checks of one linear; returns its figures (raises naming the tensor on the first failure)."""
    wname = f"{prefix}.{'weight_packed' if bits is None else 'qweight'}"
    file = ck.file_of(wname)
    try:
        rotation.validate_rotation(t["pairs"], t["theta"], t["channel_scales"], name=prefix)
    except ValueError as e:
        raise CheckpointError(f"{file}: {e}") from None
    w = dequant_linear(file, prefix, t, bits)  # [K, N]
    K, N = w.shape
    # inference identity: Givens layers (fp64) vs the dense block-diagonal R, through the weight, on
    # `groups` sampled 128-groups (first, last, random; 0 = all)
    G = K // GROUP
    pick = (
        range(G)
        if not groups or groups >= G
        else sorted({0, G - 1, *torch.randperm(G, generator=rng)[: groups - 2].tolist()})
    )
    x = torch.randn(4, K, generator=rng, dtype=torch.float64)
    xs = x * t["channel_scales"].to(torch.float64)
    givens = rotation.rotate(x, t["pairs"], t["theta"], t["channel_scales"], torch.float64)
    identity = 0.0
    for g in pick:
        sl, half = slice(g * GROUP, (g + 1) * GROUP), slice(g * GROUP // 2, (g + 1) * GROUP // 2)
        y_ref = xs[:, sl] @ rotation.dense_matrix(t["pairs"][:, sl], t["theta"][:, half]).T @ w[sl, :256]
        err = (givens[:, sl] @ w[sl, :256] - y_ref).abs().max() / y_ref.abs().max().clamp(min=1e-300)
        identity = max(identity, float(err))
    if not identity <= 1e-12:
        raise CheckpointError(f"{file}: tensor {prefix}.theta/pairs: Givens vs dense rotation differ by {identity:.3g}")
    fig = {"K": K, "N": N, "identity_rel": identity, "identity_groups": len(pick)}
    if base is not None:  # the quantized linear against the base linear on random inputs
        name = f"{prefix}.weight"
        w0 = base.get(name, shape=(N, K)).to(torch.float64)
        xb = torch.randn(64, K, generator=rng, dtype=torch.float64)
        y0 = xb @ w0.T
        y = rotation.rotate(xb, t["pairs"], t["theta"], t["channel_scales"], torch.float64) @ w
        rel = float((y - y0).norm() / y0.norm())
        fig["base_rel_rms"] = rel
        if not rel < 0.3:
            raise CheckpointError(
                f"{file}: tensor {wname}: quantized linear output is {rel:.3f} relRMS from that of "
                f"{base.file_of(name)} (nibble order or rotation wrong?)"
            )
    return fig


def verify(path, base=None, seed: int = 0, groups: int = 4) -> dict:
    """Verify every quantized linear of a ParoQuant / MXFP4-PARO checkpoint; returns the report, or raises
    one CheckpointError listing every offending tensor. `base`: the bf16 model it was made from (checks
    the AWQ nibble order and rotation: quantized vs base linear output on random inputs). `groups`:
    128-groups per linear on which the dense-vs-Givens identity is checked (0 = all)."""
    ck = path if isinstance(path, Checkpoint) else Checkpoint(path)
    base = base if base is None or isinstance(base, Checkpoint) else Checkpoint(base)
    qc = quant_config(ck)
    mods = linears(ck, qc)
    if not mods:
        raise CheckpointError(f"{ck.dir}: quant_method {qc['quant_method']!r} but no tensor *.{weight_tensor(qc)}")
    rng = torch.Generator().manual_seed(seed)
    problems, figures = [], {}
    from tqdm import tqdm

    for m in tqdm(mods, desc="verify", unit="linear", disable=None):
        try:
            t = read_linear(ck, m, qc)
            figures[m] = check_linear(ck, m, t, qc.get("bits"), rng, base, groups)
        except CheckpointError as e:
            problems.append(str(e))
    if problems:
        raise CheckpointError(f"{len(problems)} of {len(mods)} quantized linears failed:\n" + "\n".join(problems))
    worst = max(f["identity_rel"] for f in figures.values())
    report = {
        "checkpoint": str(ck.dir),
        "quantization_config": qc,
        "linears": figures,
        "unquantized": unquantized(ck),
        "max_identity_rel": worst,
    }
    if base is not None:
        report["max_base_rel_rms"] = max(f["base_rel_rms"] for f in figures.values())
    return report
