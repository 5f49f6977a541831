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

import triton
import triton.language as tl

from radiance_kernels.ops.stream.reference import RINT_MAGIC
from radiance_kernels.tl.e4m3 import e4m3_encode

_RINT: tl.constexpr = tl.constexpr(RINT_MAGIC)


@triton.jit
def load_f32(ptr, offs, mask, DT: tl.constexpr):
    """Load as fp32; DT 0 fp32, 1 fp16, 2 bf16 (``ptr`` is then an int16 view of the bf16 tensor)."""
    if DT == 2:
        b = tl.load(ptr + offs, mask=mask, other=0).to(tl.int32)
        return (b << 16).to(tl.float32, bitcast=True)
    else:
        return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)


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
def rotate_group(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL: tl.constexpr, BM: tl.constexpr,
                 NW: tl.constexpr):
    """Channel-scale and rotate one 128-group tile v [BM, 128] by partition p's layers."""
    v = v * tl.load(cs_ptr + p * K + g * 128 + cols).to(tl.float32)[None, :]
    rep = tl.zeros((NW, 1), tl.int32)
    for r in tl.static_range(NL):
        off = (p * NL + r) * K + g * 128 + cols[None, :] + rep
        mate = _rows(tl.load(mate_ptr + off), BM, NW)
        c = _rows(tl.load(cos_ptr + off), BM, NW)
        s = _rows(tl.load(sin_ptr + off), BM, NW)
        v = c * v + s * tl.gather(v, mate, axis=1)
    return v


@triton.jit
def _e4m3_x512(code):
    """e4m3 code (int32 0..255, no NaN) → its value × 512, an exact int32 in integer ops: subnormal m,
    normal (8 + m)·2^(e-1) (the row sums' fixed point; equals ``e4m3_decode(code) * 512``)."""
    e = (code >> 3) & 15
    mag = ((code & 7) | (tl.minimum(e, 1) << 3)) << tl.maximum(e - 1, 0)
    return tl.where(code >= 0x80, -mag, mag)


@triton.jit
def quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols,
                ELEM: tl.constexpr, HW: tl.constexpr):
    """Encode v [BM, 128] with per-row dequant scale [BM] (ELEM 0 e4m3, 1 int8); store codes and row sums."""
    live = scale > 0
    q = tl.where(live[:, None], tl.math.div_rn(v, tl.where(live, scale, 1.0)[:, None]), 0.0)
    if ELEM == 0:
        code = e4m3_encode(q, HW)
        rs = tl.sum(_e4m3_x512(code), axis=1).to(tl.float32) * 0.001953125
        out = code.to(tl.uint8)
    else:
        r = tl.minimum(tl.maximum((q + _RINT) - _RINT, -127.0), 127.0)
        ci = r.to(tl.int32)
        rs = tl.sum(ci, axis=1).to(tl.float32)
        out = ci.to(tl.int8)
    base = (p * M + rows).to(tl.int64)
    tl.store(q_ptr + base[:, None] * K + g * 128 + cols[None, :], out, mask=rmask[:, None])
    tl.store(rs_ptr + base * G + g, rs, mask=rmask)


def rotate_quant(x, pairs, theta, channel_scales, elem: str, granularity: str, hw: bool = False, out=None,
                 cfg: str | None = None):
    """Triton ``rotate_quant`` (same contract as the reference); returns {"A", "AS", "RS"}. ``cfg`` names a
    launch configuration of :data:`radiance_kernels.ops.stream.triton.CONFIGS` (None: the default for M)."""
    from radiance_kernels.ops.stream.triton import launch

    return launch("none", x, rotation=(pairs, theta, channel_scales), elem=elem, granularity=granularity,
                  hw=hw, out=out, cfg=cfg)
