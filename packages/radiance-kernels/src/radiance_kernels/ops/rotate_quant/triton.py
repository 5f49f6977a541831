"""Triton device code of the rotate+quant prologue, and the ``rotate_quant`` launcher.

The kernel itself is :func:`radiance_kernels.ops.stream.triton.launch` (one kernel for every producer;
``rotate_quant`` is the producer "none"). Bit-exactness with the reference rests on:

- the Givens tables (partner, cos, signed sin) computed in torch by the same function for both backends
  (memoised per records tensor on the Triton side);
- every layer computed as ``(c·x) + (s·x_mate)`` with separately rounded mul/mul/add — the kernel is
  launched with ``enable_fp_fusion=False`` so the GPU compiler does not contract them into FMAs;
- the scale division as ``tl.math.div_rn`` (IEEE), the e4m3 encoder of :mod:`radiance_kernels.tl.e4m3`
  (``HW`` picks the hardware convert on GPUs, gated equal), int8 rounding by the 1.5·2²³ trick
  (ties to even), and row sums accumulated exactly in int32 (e4m3 values ×512 are integers, formed from
  the code bits);
- bf16 loaded and stored as raw bits and rounded in integer ops (the interpreter's bf16 cast truncates).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance_kernels.ops.stream.reference import RINT_MAGIC
from radiance_kernels.tl.e4m3 import e4m3_encode
from radiance_kernels.tl.pdl import prefetch_l2

_RINT: tl.constexpr = tl.constexpr(RINT_MAGIC)


@triton.jit
def to_f32(raw, DT: tl.constexpr):
    """Loaded DT values as fp32; DT 0 fp32, 1 fp16, 2 bf16 (``raw`` then int16: the bf16 bits)."""
    if DT == 2:
        return (raw.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        return raw.to(tl.float32)


@triton.jit
def load_f32(ptr, offs, mask, DT: tl.constexpr):
    """Load as fp32; DT 0 fp32, 1 fp16, 2 bf16 (``ptr`` is then an int16 view of the bf16 tensor)."""
    return to_f32(tl.load(ptr + offs, mask=mask, other=0), DT)


@triton.jit
def round_to(v, DT: tl.constexpr):
    """fp32 → the nearest DT value (ties to even), returned as fp32."""
    if DT == 2:
        b = v.to(tl.int32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & -65536
        return b.to(tl.float32, bitcast=True)
    elif DT == 1:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v


@triton.jit
def store_dt(ptr, offs, v, mask, DT: tl.constexpr):
    """Store a DT-representable fp32 value (bf16 as its high 16 bits through an int16 view)."""
    if DT == 2:
        tl.store(ptr + offs, (v.to(tl.int32, bitcast=True) >> 16).to(tl.int16), mask=mask)
    else:
        tl.store(ptr + offs, v.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rows(t, BM: tl.constexpr, NW: tl.constexpr):
    """[NW, 128] (one copy of a table row per warp) → [BM, 128], row i = copy i % NW."""
    return tl.reshape(tl.broadcast_to(t[None, :, :], (BM // NW, NW, 128)), (BM, 128))


@triton.jit
def _layer_tables(mate_ptr, cos_ptr, sin_ptr, p, r, g, K, cols, NL: tl.constexpr, BM: tl.constexpr,
                  NW: tl.constexpr):
    """Partition p's Givens layer r on group g: partner index, cos and signed sin, each [BM, 128]."""
    off = (p * NL + r) * K + g * 128 + cols[None, :] + tl.zeros((NW, 1), tl.int32)
    return (_rows(tl.load(mate_ptr + off), BM, NW), _rows(tl.load(cos_ptr + off), BM, NW),
            _rows(tl.load(sin_ptr + off), BM, NW))


@triton.jit
def _givens(v, layer):
    """One Givens layer on v [BM, 128]: ``(c·v) + (s·v[mate])``, separately rounded."""
    mate, c, s = layer
    return c * v + s * tl.gather(v, mate, axis=1)


@triton.jit
def rotate_group(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL: tl.constexpr, BM: tl.constexpr,
                 NW: tl.constexpr):
    """Channel-scale and rotate one 128-group tile v [BM, 128] by partition p's layers, each layer's tables
    loaded as it comes (one layer's in registers at a time)."""
    v = v * tl.load(cs_ptr + p * K + g * 128 + cols).to(tl.float32)[None, :]
    for r in tl.static_range(NL):
        v = _givens(v, _layer_tables(mate_ptr, cos_ptr, sin_ptr, p, r, g, K, cols, NL, BM, NW))
    return v


@triton.jit
def group_tables(mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL: tl.constexpr, BM: tl.constexpr,
                 NW: tl.constexpr):
    """Everything :func:`rotate_group` reads for group g, loaded at once: the channel scales [128] and each
    layer's tables — constants, so a programmatic dependent may load them before its wait."""
    layers = ()
    for r in tl.static_range(NL):
        layers = layers + (_layer_tables(mate_ptr, cos_ptr, sin_ptr, p, r, g, K, cols, NL, BM, NW),)
    return tl.load(cs_ptr + p * K + g * 128 + cols).to(tl.float32), layers


@triton.jit
def prefetch_tables(mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL: tl.constexpr):
    """:func:`prefetch_l2` of everything :func:`rotate_group` reads for group g (NVIDIA, a programmatic dependent
    before its wait)."""
    prefetch_l2(cs_ptr + p * K + g * 128 + cols)
    for r in tl.static_range(NL):
        off = (p * NL + r) * K + g * 128 + cols
        prefetch_l2(mate_ptr + off)
        prefetch_l2(cos_ptr + off)
        prefetch_l2(sin_ptr + off)


@triton.jit
def rotate_loaded(v, tables, NL: tl.constexpr):
    """:func:`rotate_group` on tables :func:`group_tables` loaded: the same operations in the same order."""
    cs, layers = tables
    v = v * cs[None, :]
    for r in tl.static_range(NL):
        v = _givens(v, layers[r])
    return v


@triton.jit
def _e4m3_x512(code):
    """e4m3 code (int32 0..255, no NaN) → its value × 512, an exact int32 in integer ops: subnormal m,
    normal (8 + m)·2^(e-1) (the row sums' fixed point; equals ``e4m3_decode(code) * 512``)."""
    e = (code >> 3) & 15
    mag = ((code & 7) | (tl.minimum(e, 1) << 3)) << tl.maximum(e - 1, 0)
    return tl.where(code >= 0x80, -mag, mag)


#: The row scales for which :func:`_quotient`'s ``FAST`` form is taken (see there).
_FAST_MIN_SCALE: tl.constexpr = tl.constexpr(2.0**-90)
_FAST_MAX_SCALE: tl.constexpr = tl.constexpr(2.0**126)


@triton.jit
def _quotient(v, scale, live, FAST: tl.constexpr):
    """v [BM, 128] / scale [BM], correctly rounded (IEEE ``div.rn``); 0 on rows that are not ``live``.

    ``FAST`` (GPUs: hardware FMA): by the row's correctly rounded reciprocal r and Markstein's correction,
    ``q0 = v·r``, ``q = fma(fma(-q0, scale, v), r, q0)`` — three operations per element instead of ``div.rn``'s seven
    and its range check. With r = RN(1/scale) and q0 within an ulp of v / scale, the residual ``v - q0·scale`` is exact
    and q = RN(v / scale) unless something underflows. Taken when every live row's scale lies in [2^-90, 2^126]: there
    the residual is exact for every quotient of magnitude >= 2^-11, and a smaller one — code 0 in e4m3 and int8
    alike, exact or not — stays within an ulp (checked against exact rationals in the tests, which also find wrong
    quotients above 2^-11 once scales go below 2^-100); a tile with another scale takes ``div.rn``.
    """
    d = tl.where(live, scale, 1.0)
    if FAST:
        if (tl.min(d, axis=0) >= _FAST_MIN_SCALE) & (tl.max(d, axis=0) <= _FAST_MAX_SCALE):
            r = tl.math.div_rn(1.0, d)[:, None]
            q0 = v * r
            q = tl.fma(tl.fma(-q0, d[:, None], v), r, q0)
        else:
            q = tl.math.div_rn(v, d[:, None])
    else:
        q = tl.math.div_rn(v, d[:, None])
    return tl.where(live[:, None], q, 0.0)


@triton.jit
def _e4m3_row_sums(code, FAST: tl.constexpr):
    """Sum over each row of the e4m3 values of code [BM, 128] (int32 codes), exact, as fp32 [BM]: the values ×512,
    integers, summed in int32 and rounded once. ``FAST`` (GPUs) forms them by the hardware decode (e4m3 -> fp16,
    exact) and a multiply, else in integer ops (:func:`_e4m3_x512`; the interpreter has no exact fp8 decode)."""
    if FAST:
        x512 = (code.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32) * 512.0).to(tl.int32)
    else:
        x512 = _e4m3_x512(code)
    return tl.sum(x512, axis=1).to(tl.float32) * 0.001953125


@triton.jit
def quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols,
                ELEM: tl.constexpr, HW: tl.constexpr, FAST: tl.constexpr = False):
    """Encode v [BM, 128] with per-row dequant scale [BM] (ELEM 0 e4m3, 1 int8); store codes and row sums.
    ``FAST``: :func:`_quotient`'s and :func:`_e4m3_row_sums`' GPU forms (same bits)."""
    q = _quotient(v, scale, scale > 0, FAST)
    if ELEM == 0:
        code = e4m3_encode(q, HW)
        rs = _e4m3_row_sums(code, FAST)
        out = code.to(tl.uint8)
    else:
        r = tl.minimum(tl.maximum((q + _RINT) - _RINT, -127.0), 127.0)
        ci = r.to(tl.int32)
        rs = tl.sum(ci, axis=1).to(tl.float32)
        out = ci.to(tl.int8)
    base = (p * M + rows).to(tl.int64)
    tl.store(q_ptr + base[:, None] * K + g * 128 + cols[None, :], out, mask=rmask[:, None])
    tl.store(rs_ptr + base * G + g, rs, mask=rmask)


def output_buffers(given: dict[str, torch.Tensor] | None, wanted: dict[str, tuple[tuple, torch.dtype]],
                   device) -> dict[str, torch.Tensor]:
    """The launch's outputs by name: each ``given`` buffer (tests poison them) checked to be a contiguous tensor of
    the ``wanted`` (shape, dtype) — a ValueError names it otherwise —, the others allocated."""
    given = given or {}
    out = {}
    for name, (shape, dtype) in wanted.items():
        t = given.get(name)
        if t is None:
            t = torch.empty(shape, dtype=dtype, device=device)
        elif tuple(t.shape) != tuple(shape) or t.dtype != dtype or not t.is_contiguous():
            raise ValueError(f"out[{name!r}] must be a contiguous {dtype} {list(shape)}, "
                             f"got {t.dtype} {list(t.shape)}")
        out[name] = t
    return out


def default_config(x: torch.Tensor, granularity: str) -> str:
    """The launch config ``rotate_quant`` takes for x when the caller names none: the Gluon prefill kernel's
    default (:mod:`.gluon`) for per-group scales from :data:`.gluon.MIN_M` rows where it runs and was measured, else
    the Triton kernel's default for M (:func:`radiance_kernels.ops.stream.triton.default_config`)."""
    from radiance_kernels.ops.rotate_quant import gluon
    from radiance_kernels.ops.stream.triton import default_config as triton_default

    if granularity == "group" and x.shape[0] >= gluon.MIN_M and gluon.measured_on(x.device):
        return gluon.DEFAULT
    return triton_default(x.shape[0])


def rotate_quant(x, pairs, theta, channel_scales, elem: str, granularity: str, hw: bool = False, out=None,
                 cfg: str | None = None):
    """Triton ``rotate_quant`` (same contract as the reference); returns {"A", "AS", "RS"}. ``cfg`` names a
    launch configuration of the Triton kernel (:data:`radiance_kernels.ops.stream.triton.CONFIGS`) or of the Gluon
    prefill kernel (:data:`.gluon.CONFIGS`); None: :func:`default_config`."""
    from radiance_kernels.ops.rotate_quant import gluon
    from radiance_kernels.ops.stream.triton import launch

    cfg = default_config(x, granularity) if cfg is None else cfg
    if cfg in gluon.CONFIGS:
        return gluon.rotate_quant(x, pairs, theta, channel_scales, elem, granularity, hw, out, cfg)
    return launch("none", x, rotation=(pairs, theta, channel_scales), elem=elem, granularity=granularity,
                  hw=hw, out=out, cfg=cfg)
