"""Every ``RADIANCE_*`` environment knob, as one typed, frozen settings object.

Rules: a knob set to the empty string counts as unset; an unknown ``RADIANCE_*`` name or a value that
does not parse raises :class:`KnobError` naming the variable; :func:`settings` resolves once per
process; :func:`announce` prints the resolved table once per process tree; :func:`compile_cache_key`
hashes exactly the knobs that change the code vLLM compiles (``Knob.compiled``).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

PREFIX = "RADIANCE_"
#: Set in the environment after the first print so child processes (engine core, workers) stay quiet;
#: whoever starts a new server tree (``VLLMServer``, ``radiance serve``) removes it.
PRINTED_MARK = "_RADIANCE_SETTINGS_PRINTED"


class KnobError(ValueError):
    """A ``RADIANCE_*`` variable is unknown or holds a value that does not parse."""


def _bool(raw: str) -> bool:
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected one of 1/0/true/false/yes/no/on/off")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in allowed:
            raise ValueError(f"expected one of {'/'.join(allowed)}")
        return raw

    parse.allowed = allowed
    return parse


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("expected a positive integer")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError("expected a positive finite number")
    return value


def _names(raw: str) -> tuple[str, ...]:
    items = tuple(sorted({s.strip() for s in raw.split(",") if s.strip()}))
    if not all(s.replace("_", "").replace(".", "").isalnum() for s in items):
        raise ValueError("expected a comma-separated list of module-name suffixes")
    return items


@dataclass(frozen=True)
class Knob:
    field: str
    parse: Callable[[str], Any]
    default: Any
    compiled: bool
    doc: str

    @property
    def env(self) -> str:
        return PREFIX + self.field.upper()


KNOBS: tuple[Knob, ...] = (
    Knob("backend", _choice("auto", "reference", "triton"), "auto", True,
         "kernel backend; auto = triton on a GPU platform, reference on vLLM's CPU platform"),
    Knob("pq_act", _choice("e4m3", "int8"), "e4m3", True,
         "paroquant (int4/int5) activation element (seeds: RADIANCE_PQ_I8=1 is int8); MXFP4 paths use e4m3"),
    Knob("pq_decode_act", _choice("same", "e4m3", "int8"), "same", True,
         "paroquant activation element of calls of at most 64 tokens (the decode band): int8 there runs mma.sync on "
         "its own 8-bit codes while RADIANCE_PQ_ACT=e4m3 keeps the library fp8 prefill (H200: the 64-layer decode "
         "stack 8 % faster); same = RADIANCE_PQ_ACT"),
    Knob("pq_scales", _choice("token", "group"), "group", True,
         "paroquant activation scales per token or per 128-channel group (seeds: PTOK / PG); MXFP4 paths: token"),
    Knob("pq_zpe", _bool, False, True,
         "zero point as a GEMM epilogue instead of the per-group row-sum correction (seeds: ZPE)"),
    Knob("stream", _bool, False, True,
         "fused producers on dense decoder layers: add+RMSNorm (→ qkv, gate_up) and silu·mul (→ down), "
         "each with the consumer's rotate + quant; paroquant W4A8 consumers"),
    Knob("stream_defer", _bool, True, True,
         "with RADIANCE_STREAM=1: the decode GEMMs a fused producer reads (gate_up → silu·mul, o_proj → the "
         "post-attention norm, down → the next layer's norm; bf16 models, row-parallel ones at TP=1) leave their "
         "split-K partials to it instead of reducing them (same bits); 0: every GEMM reduces its own"),
    Knob("checkall", _bool, False, True,
         "check each new GEMM (N, K, M) in serve against the reference op, column-chunked; logs real vs zero inputs"),
    Knob("checkall_chunk", _positive_int, 512, False, "CHECKALL reference chunk width (output columns)"),
    Knob("checkall_tol", _positive_float, 5e-3, False, "CHECKALL relative-error bar; above it raises"),
    Knob("nvfp4_mxfp4", _bool, False, True,
         "serve compressed-tensors NVFP4 checkpoints by requantizing to MXFP4 at load"),
    Knob("nvfp4_fp8_layers", _choice("mxfp4", "dequant"), "mxfp4", True,
         "NVFP4 path: FP8 per-channel linears requantized to MXFP4, or dequantized to the model dtype"),
    Knob("nvfp4_bf16_layers", _names, (), True,
         "NVFP4 path: comma-separated suffixes of unquantized linears to requantize to MXFP4 (e.g. in_proj_ba)"),
    Knob("nvfp4_exp", _choice("mse", "ocp"), "mse", False,
         "NVFP4 path: MXFP4 block exponent rule (mse: no-clip vs one binade finer by squared error)"),
    Knob("pdl", _bool, True, False,
         "programmatic dependent launch where the GPU has it (CUDA sm_90+): each producer launch starts during the "
         "decode GEMM before it and waits for it; 0 launches every kernel plainly"),
)
_BY_ENV = {k.env: k for k in KNOBS}


@dataclass(frozen=True)
class Settings:
    """The resolved knobs; field names are the variable names without ``RADIANCE_``, lower-cased."""

    backend: str = "auto"
    pq_act: str = "e4m3"
    pq_decode_act: str = "same"
    pq_scales: str = "group"
    pq_zpe: bool = False
    stream: bool = False
    stream_defer: bool = True
    checkall: bool = False
    checkall_chunk: int = 512
    checkall_tol: float = 5e-3
    nvfp4_mxfp4: bool = False
    nvfp4_fp8_layers: str = "mxfp4"
    nvfp4_bf16_layers: tuple[str, ...] = ()
    nvfp4_exp: str = "mse"
    pdl: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Parse ``environ`` (default ``os.environ``); raises KnobError naming the first bad variable."""
        environ = os.environ if environ is None else environ
        unknown = sorted(k for k in environ if k.startswith(PREFIX) and k not in _BY_ENV)
        if unknown:
            raise KnobError(f"unknown Radiance knob(s) {', '.join(unknown)}; known: {', '.join(sorted(_BY_ENV))}")
        values = {}
        for knob in KNOBS:
            raw = environ.get(knob.env, "").strip()
            if raw == "":
                continue
            try:
                values[knob.field] = knob.parse(raw.lower() if knob.parse is _bool else raw)
            except ValueError as exc:
                raise KnobError(f"{knob.env}={raw!r}: {exc}") from None
        if "stream_defer" in values and not values.get("stream", False):
            raise KnobError("RADIANCE_STREAM_DEFER acts on the fused producers: it needs RADIANCE_STREAM=1")
        if values.get("pq_decode_act") == values.get("pq_act", cls.pq_act):
            raise KnobError(f"RADIANCE_PQ_DECODE_ACT={values['pq_decode_act']} is RADIANCE_PQ_ACT's element: it would "
                            "change nothing (unset it, or name the other element)")
        return cls(**values)

    def as_env(self) -> dict[str, str]:
        """The non-default knobs as environment variables (what a launcher forwards)."""
        out = {}
        for knob in KNOBS:
            value = getattr(self, knob.field)
            if value != knob.default:
                out[knob.env] = _render(value)
        return out

    def compile_cache_key(self) -> str:
        """A short hash over every knob that changes compiled code (defaults included)."""
        parts = [f"{k.env}={_render(getattr(self, k.field))}" for k in KNOBS if k.compiled]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]

    def table(self) -> str:
        rows = [f"  {k.env:<28} {_render(getattr(self, k.field)) or '-':<10} "
                f"{'' if getattr(self, k.field) == k.default else '(set)'}" for k in KNOBS]
        return "\n".join([f"[radiance] settings (compile-cache key {self.compile_cache_key()}):", *rows])


assert [f.name for f in fields(Settings)] == [k.field for k in KNOBS], "Settings and KNOBS out of step"
assert all(getattr(Settings(), k.field) == k.default for k in KNOBS), "Settings defaults out of step"


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


_SETTINGS: Settings | None = None


def settings() -> Settings:
    """The process's settings, parsed from the environment on first use."""
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = Settings.from_env()
    return _SETTINGS


def announce(extra: str = "") -> None:
    """Print the resolved settings once per process tree (children inherit the mark)."""
    if os.environ.get(PRINTED_MARK):
        return
    os.environ[PRINTED_MARK] = "1"
    print(settings().table() + (f"\n{extra}" if extra else ""), file=sys.stderr, flush=True)


def markdown_table() -> str:
    """The knob table for the README."""
    lines = ["| variable | values | default | keys compile cache | meaning |", "|---|---|---|---|---|"]
    for k in KNOBS:
        lines.append(f"| `{k.env}` | {_values(k)} | `{_render(k.default) or '(empty)'}` | "
                     f"{'yes' if k.compiled else 'no'} | {k.doc} |")
    return "\n".join(lines)


def _values(k: Knob) -> str:
    if k.parse is _bool:
        return "0/1"
    if k.parse in (_positive_int, _positive_float):
        return "> 0"
    if k.parse is _names:
        return "list"
    return "/".join(k.parse.allowed)
