"""compressed-tensors NVFP4 / FP8 checkpoints: read, requantise to MXFP4 (offline and per tensor at load).

NVFP4 (``format: "nvfp4-pack-quantized"``), per linear ``W [N, K]``: ``weight_packed [N, K/2]`` uint8
(e2m1 codes, low nibble = even column), ``weight_scale [N, K/16]`` float8_e4m3fn, ``weight_global_scale
[1]`` fp32 (a divisor), ``input_global_scale [1]`` fp32:
``W = e2m1 · (scale / global)`` in fp32, in that order (bit-identical to compressed-tensors' own
dequantisation). FP8 per-channel (``float-quantized``): ``weight [N, K]`` float8_e4m3fn, ``weight_scale [N, 1]``:
``W = fp8 · scale``.

MXFP4 output (``radiance_kernels.formats.mx``): ``weight_packed [N, K/2]`` uint8 + ``weight_scale
[N, K/32]`` uint8 e8m0, exponent rule ``mse`` (default) or ``ocp``. A converted checkpoint carries
``{"quant_method": "radiance_mxfp4", "block_size": 32, "exp_rule": rule}``; modules left unquantized
store a plain ``weight`` (lm_head is dequantised to bf16).
"""

from __future__ import annotations

import re
import time

import torch

from radiance_kernels.formats import e4m3, mx
from radiance_quant.io import Checkpoint, CheckpointError, Job, run_units, units

NV_BLOCK = 16
E2M1_MAX, E4M3_MAX = 6.0, 448.0
AB = re.compile(r"\.in_proj_(a|b|ba)$")


def global_scale(w: torch.Tensor) -> torch.Tensor:
    """NVFP4 global scale [1] = 448·6 / amax(W) (fused partitions share the minimum over them)."""
    return (E4M3_MAX * E2M1_MAX / w.to(torch.float32).abs().amax().clamp(min=1e-12)).reshape(1)


def nvfp4_quantize(w: torch.Tensor, glob: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """W [N, K] -> NVFP4 tensors, compressed-tensors' recipe: global (default :func:`global_scale`);
    per 16-block scale = e4m3(amax_b / 6 · global); codes = e2m1(W / (scale / global)) (zero scale -> 0).
    Equal in value to llm-compressor's output (it writes -0 codes where this writes +0)."""
    x = w.to(torch.float32)
    N, K = x.shape
    if K % NV_BLOCK:
        raise CheckpointError(f"nvfp4_quantize: K={K} is not a multiple of {NV_BLOCK}")
    glob = global_scale(x) if glob is None else glob.to(torch.float32).reshape(1).clone()
    blocks = x.reshape(N, K // NV_BLOCK, NV_BLOCK)
    scale = e4m3.decode(e4m3.encode(blocks.abs().amax(-1) / E2M1_MAX * glob))
    div = torch.where(scale > 0, scale / glob, torch.ones_like(scale))[..., None]
    codes = torch.where(scale[..., None] > 0, mx.e2m1_encode(blocks / div).to(torch.int32), 0)
    return {
        "weight_packed": mx.pack_fp4(codes.reshape(N, K)),
        "weight_scale": scale.to(torch.float8_e4m3fn),
        "weight_global_scale": glob,
        "input_global_scale": torch.ones(1),
    }


def nvfp4_dequantize(
    weight_packed: torch.Tensor, weight_scale: torch.Tensor, weight_global_scale: torch.Tensor
) -> torch.Tensor:
    """NVFP4 tensors -> W [N, K] fp32 = e2m1 · (scale / global)."""
    v = mx.e2m1_decode(mx.unpack_fp4(weight_packed))
    s = weight_scale.to(torch.float32) / weight_global_scale.to(torch.float32).reshape(())
    return v * s.repeat_interleave(NV_BLOCK, dim=-1)


def fp8_channel_dequantize(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """FP8 per-channel -> W [N, K] fp32 = fp8 · scale[n]."""
    return weight.to(torch.float32) * weight_scale.to(torch.float32).reshape(-1, 1)


def nvfp4_to_mxfp4(
    weight_packed: torch.Tensor, weight_scale: torch.Tensor, weight_global_scale: torch.Tensor, rule: str = "mse"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor requant for the vLLM plugin's load path: NVFP4 -> (packed [N, K/2], e8m0 [N, K/32])."""
    return mx.quantize_mxfp4(nvfp4_dequantize(weight_packed, weight_scale, weight_global_scale), rule=rule)


def fp8_to_mxfp4(
    weight: torch.Tensor, weight_scale: torch.Tensor, rule: str = "mse"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor requant: FP8 per-channel -> (packed [N, K/2], e8m0 [N, K/32])."""
    return mx.quantize_mxfp4(fp8_channel_dequantize(weight, weight_scale), rule=rule)


def module_kind(ck: Checkpoint, m: str) -> str:
    """'nvfp4', 'fp8' or 'dense' from the stored tensors of module `m` (checking shapes and dtypes)."""
    if f"{m}.weight_packed" in ck:
        _, (N, K2) = ck.spec(f"{m}.weight_packed")
        ck.check(f"{m}.weight_packed", torch.uint8)
        ck.check(f"{m}.weight_scale", torch.float8_e4m3fn, (N, 2 * K2 // NV_BLOCK))
        ck.check(f"{m}.weight_global_scale", torch.float32, (1,))
        return "nvfp4"
    dt, (N, _) = ck.spec(f"{m}.weight")
    if dt == torch.float8_e4m3fn:
        sdt, ssh = ck.spec(f"{m}.weight_scale")
        if ssh not in ((N, 1), (N,)) or not sdt.is_floating_point:
            raise CheckpointError(
                f"{ck.file_of(m + '.weight_scale')}: tensor {m}.weight_scale: expected float "
                f"[{N}, 1] (FP8 per-channel), got {sdt} {list(ssh)}"
            )
        return "fp8"
    return "dense"


def dequantize_module(ck: Checkpoint, m: str) -> torch.Tensor:
    """Any NVFP4 / FP8 / dense module of `ck` -> W [N, K] fp32."""
    kind = module_kind(ck, m)
    if kind == "nvfp4":
        t = [ck.get(f"{m}.{k}") for k in ("weight_packed", "weight_scale", "weight_global_scale")]
        w = nvfp4_dequantize(*t)
        if not torch.isfinite(w).all():
            raise CheckpointError(
                f"{ck.file_of(m + '.weight_scale')}: tensor {m}.weight_scale/global_scale: "
                "non-finite dequantised weight"
            )
        return w
    if kind == "fp8":
        w = fp8_channel_dequantize(ck.get(f"{m}.weight"), ck.get(f"{m}.weight_scale"))
        if not torch.isfinite(w).all():
            raise CheckpointError(f"{ck.file_of(m + '.weight_scale')}: tensor {m}.weight_scale: non-finite scale")
        return w
    return ck.get(f"{m}.weight").to(torch.float32)


def _modules(ck: Checkpoint) -> list[str]:
    """Linear modules: those storing `weight_packed`, or a 2-D `weight`."""
    out = {n[: -len(".weight_packed")] for n in ck.names() if n.endswith(".weight_packed")}
    return sorted(out | {n[: -len(".weight")] for n in ck.names() if n.endswith(".weight") and len(ck.spec(n)[1]) == 2})


def convert(src_dir, out_dir, rule: str = "mse", fp8_layers: str = "mxfp4", in_proj_ab: bool = False) -> dict:
    """NVFP4 (compressed-tensors) checkpoint -> MXFP4 checkpoint (resumable, atomic); returns the report.

    NVFP4 linears -> MXFP4; FP8 per-channel linears -> MXFP4 (`fp8_layers="mxfp4"`) or bf16 ("bf16");
    lm_head -> bf16; bf16 GDN in_proj_a/b -> MXFP4 when `in_proj_ab`. Activation scales are dropped.
    """
    if rule not in ("mse", "ocp") or fp8_layers not in ("mxfp4", "bf16"):
        raise CheckpointError(f"convert: bad options rule={rule!r} (mse|ocp) fp8_layers={fp8_layers!r} (mxfp4|bf16)")
    t0 = time.perf_counter()
    src = Checkpoint(src_dir)
    qc = src.config.get("quantization_config", {})
    if qc.get("quant_method") != "compressed-tensors":
        raise CheckpointError(
            f"{src.dir / 'config.json'}: quantization_config.quant_method is not "
            f"'compressed-tensors' ({qc.get('quant_method')!r})"
        )
    kinds = {m: module_kind(src, m) for m in _modules(src)}
    if "nvfp4" not in kinds.values():
        raise CheckpointError(f"{src.dir}: no NVFP4 module (no *.weight_packed tensor)")
    for m, k in kinds.items():  # scales are small: check them all before the output directory is touched
        for name in {"nvfp4": ("weight_scale", "weight_global_scale"), "fp8": ("weight_scale",)}.get(k, ()):
            s = src.get(f"{m}.{name}").to(torch.float32)
            if not torch.isfinite(s).all() or (name == "weight_global_scale" and (s <= 0).any()):
                raise CheckpointError(f"{src.file_of(f'{m}.{name}')}: tensor {m}.{name}: non-finite or zero scale")
    figures: dict[str, dict] = {}

    def target(m: str) -> str:
        if m.endswith("lm_head"):
            return "bf16"
        if kinds[m] == "nvfp4":
            return "mxfp4"
        if kinds[m] == "fp8":
            return fp8_layers
        if in_proj_ab and AB.search(m) and len(src.spec(f"{m}.weight")[1]) == 2:
            return "mxfp4"
        return "keep"

    def convert_unit(unit: str, names: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        mods = sorted({m for m in kinds if f"{m}.weight" in names or f"{m}.weight_packed" in names})
        owned = {
            f"{m}.{k}"
            for m in mods
            if target(m) != "keep"
            for k in (
                "weight",
                "weight_packed",
                "weight_scale",
                "weight_global_scale",
                "input_global_scale",
                "input_scale",
            )
        }
        for n in names:
            if n not in owned:
                out[n] = src.get(n)
        for m in mods:
            tgt = target(m)
            if tgt == "keep":
                continue
            w = dequantize_module(src, m)
            if tgt == "bf16":
                out[f"{m}.weight"] = w.to(torch.bfloat16)
                continue
            packed, scales = mx.quantize_mxfp4(w, rule=rule)
            err = mx.dequantize_mxfp4(packed, scales) - w
            figures[m] = {"from": kinds[m], "rel_rms": float(err.norm() / w.norm().clamp(min=1e-30))}
            out |= {f"{m}.weight_packed": packed, f"{m}.weight_scale": scales}
        return out

    plan = units(src.names())
    options = {"rule": rule, "fp8_layers": fp8_layers, "in_proj_ab": in_proj_ab}
    job = Job(
        out_dir, {"tool": "nvfp4-to-mxfp4", "format_version": 1, "source": src.fingerprint()} | options, list(plan)
    )
    written = run_units(job, plan, convert_unit, "nvfp4->mxfp4")
    qconf = {"quant_method": "radiance_mxfp4", "block_size": mx.MX_BLOCK, "exp_rule": rule}
    config = dict(src.config) | {"quantization_config": qconf}
    report = {
        "tool": "nvfp4-to-mxfp4",
        "source": str(src.dir),
        **options,
        "quantization_config": qconf,
        "module_kinds": kinds,
        "units_written": written,
        "units_resumed": [u for u in plan if u not in written],
        "linears": figures,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    job.finish(config, src.dir, report)
    return report


def ct_config(nvfp4_targets: list[str], fp8_targets: list[str]) -> dict:
    """A compressed-tensors quantization_config for a mixed NVFP4 + FP8 per-channel checkpoint."""
    fp4 = {
        "num_bits": 4,
        "type": "float",
        "symmetric": True,
        "strategy": "tensor_group",
        "group_size": NV_BLOCK,
        "dynamic": False,
        "observer": "minmax",
    }
    fp8 = {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "strategy": "channel",
        "dynamic": False,
        "observer": "minmax",
    }
    groups = {
        "group_0": {
            "targets": nvfp4_targets,
            "weights": fp4,
            "format": "nvfp4-pack-quantized",
            "input_activations": fp4 | {"dynamic": "local"},
            "output_activations": None,
        }
    }
    if fp8_targets:
        groups["group_1"] = {
            "targets": fp8_targets,
            "weights": fp8,
            "format": "float-quantized",
            "input_activations": None,
            "output_activations": None,
        }
    return {
        "quant_method": "compressed-tensors",
        "format": "mixed-precision" if fp8_targets else "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": [],
        "kv_cache_scheme": None,
        "sparsity_config": {},
    }


def build_tiny_nvfp4(base_dir, out_dir) -> dict:
    """Mixed NVFP4 checkpoint shaped like the seeds' 27B one: MLP linears NVFP4 (gate/up share one
    global scale, the minimum, as llm-compressor writes fused partitions), attention linears and lm_head
    FP8 per-channel, everything else copied (resumable, atomic)."""
    base = Checkpoint(base_dir)
    mlp = re.compile(r"\.mlp\..*(gate|up|down)_proj$")
    fp8 = re.compile(r"(\.self_attn\.(q|k|v|o)_proj|\.linear_attn\.(in_proj_qkvz|out_proj)|^lm_head)$")
    mods = {n[: -len(".weight")]: n for n in base.names() if n.endswith(".weight") and len(base.spec(n)[1]) == 2}
    fused: dict[str, torch.Tensor] = {}  # gate/up partition key -> shared global scale
    for m, n in mods.items():
        if mlp.search(m):
            key = re.sub(r"(gate|up)_proj$", "gate_up", m)
            g = global_scale(base.get(n))
            fused[key] = torch.minimum(fused[key], g) if key in fused else g

    def convert_unit(unit: str, names: list[str]) -> dict[str, torch.Tensor]:
        out = {}
        for n in names:
            m = n[: -len(".weight")] if n.endswith(".weight") else None
            if m in mods and mlp.search(m):
                glob = fused[re.sub(r"(gate|up)_proj$", "gate_up", m)]
                out |= {f"{m}.{k}": v for k, v in nvfp4_quantize(base.get(n), glob).items()}
            elif m in mods and fp8.search(m):
                w = base.get(n).to(torch.float32)
                s = (w.abs().amax(1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)
                out |= {f"{m}.weight": (w / s).to(torch.float8_e4m3fn), f"{m}.weight_scale": s}
            else:
                out[n] = base.get(n)
        return out

    plan = units(base.names())
    job = Job(out_dir, {"tool": "tiny-nvfp4", "format_version": 1, "base": base.fingerprint()}, list(plan))
    run_units(job, plan, convert_unit, "tiny nvfp4")
    qconf = ct_config(
        ["re:.*mlp.*(gate|up|down)_proj$"],
        ["re:.*self_attn.(q|k|v|o)_proj$", "re:.*linear_attn.(in_proj_qkvz|out_proj)$", "lm_head"],
    )
    report = {"tool": "tiny-nvfp4", "base": str(base.dir)}
    job.finish(dict(base.config) | {"quantization_config": qconf}, base.dir, report)
    return report
