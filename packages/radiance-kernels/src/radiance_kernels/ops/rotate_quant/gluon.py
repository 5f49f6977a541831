"""Prefill ``rotate_quant`` on Gluon (NVIDIA): the Givens layers with the rows across the lanes.

The Triton kernel (:mod:`radiance_kernels.ops.stream.triton`) holds a 128-group's channels across a warp's lanes,
so each layer's partner lookup (``tl.gather`` along the channels) is warp-local: a shuffle per source register and
a select per candidate, ~4 SHFL + 2 FSEL + index math per element and layer (ptxas sm_90: 142-161 instructions per
element in all, at bm16w4). Here a program owns ``BR = 32·RPT`` rows of one 128-group, rotated in the layout ``LR``:
lanes along the rows, each thread ``RPT`` consecutive rows × ``128 / NW`` consecutive channels, the ``NW`` warps side
by side along the channels. The lookup then crosses warps, so Triton lowers the gather through shared memory — the
tile stored at word ``row + BR·channel``, the partner read back at ``row + BR·mate`` — and every lane of a warp asks
for the same channel (a layer's pairs are the same for every row): a warp's reads cover consecutive words, ``RPT``
of them per lane as one vector, without a bank conflict whatever the pairs (the conflicts the seeds found bounding
their RDNA4 producer; H200 call 124, ncu: the gather's accesses at their ideal wavefronts). Per element and layer:
one shared store, one shared load (16-byte vectors at ``RPT`` 4), two FMUL and an FADD (the reference's
``(c·x) + (s·x_mate)``, launched without FMA contraction), half an address LEA, the layer's tables loaded once per
thread for its ``RPT`` rows.

Loads, stores and the quantiser run in a second layout ``LQ`` (8 lanes along a row's 128 channels): coalesced
16-byte loads and code stores, the per-row amax and row sums in-thread and over 8 lanes (in ``LR`` both cross the
warps through shared memory — 32-way bank conflicts, and the codes went out a byte at a time: 45 % of the stall
samples, call 124); the tile moves between the two by ``gl.convert_layout`` (the raw bf16 bits in, the rotated fp32
tile out). Persistent: ``ctas`` programs per SM, each a contiguous run of tiles, partition fastest (a tile's P
partitions re-read its rows from L2 side by side), then row block (a program's group tables stay in L1).

The math is :mod:`.reference`'s operation for operation, as the Triton kernel's (the helpers :func:`to_f32` and
:func:`quant_store` are shared), so both are byte-identical to the reference. ``PASS``: 0 per-group (scale, codes and
row sums of each group), 1 per-token amaxes (each (row, group)'s amax of the rotated group into ``amax [P, M, G]``),
2 per-token codes (the row's scale from its ``G`` amaxes folded in group order, then the group rotated again and
encoded — twice the rotation, no fp32 scratch round trip). What bounds it (call 134, ncu on gl128w16c at M = 8192):
latency — one CTA of 16 warps per SM (118 registers), 4 warps per scheduler through each layer's CTA barrier; the
shared pipe that carries the exchanges (a store and a load of every element per layer) is 42 % busy, L1 60 %. Its
shared traffic alone is ~101 us per partition at M = 8192, K = 5120. Not the table loads' latency (a layer ahead: no
gain; in L1: 1-5 %, calls 128-129) nor two 8-warp CTAs per SM at 128 registers (the same 16 warps; even, calls 126
and 128).

NVIDIA-only where it has been measured (Gluon's ``BlockedLayout``); the portable twin is the Triton kernel, the same
math. Not runnable under the interpreter: tested on GPUs against the reference, compiled for sm_90 on the CPU.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from radiance_kernels.backends import BackendUnavailableError, triton_interpreted
from radiance_kernels.formats.rotation import GROUP
from radiance_kernels.ops.rotate_quant import reference
from radiance_kernels.ops.rotate_quant.triton import output_buffers, quant_store, to_f32

_G: gl.constexpr = gl.constexpr(GROUP)

#: Launch configurations: ``RPT`` rows per thread (``BR = 32·RPT`` rows per program), ``num_warps`` warps along the 128
#: channels (``128 / num_warps`` channels per thread in the rotation), ``ctas`` programs per SM in the persistent grid
#: (``maxnreg``: the register cap that lets that many fit), ``fast``: the quantiser's GPU forms (Markstein's quotient,
#: the hardware e4m3 decode for the row sums: :func:`radiance_kernels.ops.rotate_quant.triton.quant_store`; same bits),
#: ``chunked``: the tile order (:func:`_tile`). Shared memory: the gather's ``BR × 128`` fp32 tile. H200 call 129 (M =
#: 8192, K = 5120, us, P = 1 / 3; Triton bm16w4: e4m3 per-group 296 / 874, int8 per-group 257 / 761): gl128w16c 241 /
#: 646, 223 / 578; the ablations gl128w16 (strided order, call 126's default: 245 / 675, 224 / 609), gl64w8r128c (two
#: CTAs per SM: 239 / 691, 220 / 633); gl128w16c_div (div.rn; not timed on this order — call 126's strided gl128w16_div:
#: 266 / 771, 220 / 636). Measured and dropped: the next layer's partner channels loaded before this layer's exchange
#: (call 128: 0 to -3 %), the next tile's activations loaded during this one (call 126: -1 to -3 %), 16-warp CTAs of 64
#: rows at 64 registers (call 128: -5 to -18 %). ptxas sm_90 (Triton 3.6): gl128w16c 118 registers (one CTA per SM).
_BASE = dict(RPT=4, num_warps=16, ctas=1, fast=True, chunked=True)
CONFIGS = {name: {**_BASE, **change} for name, change in {
    "gl128w16c": {},
    "gl128w16": dict(chunked=False),
    "gl128w16c_div": dict(fast=False),
    "gl64w8r128c": dict(RPT=2, num_warps=8, ctas=2, maxnreg=128),
}.items()}
DEFAULT = "gl128w16c"
#: ``rotate_quant`` takes :data:`DEFAULT` from this M for per-group scales on :func:`measured_on` GPUs (H200 call 129:
#: 1.06-1.37x the Triton kernel at M = 1024, 1.16-1.35x at 8192; call 126: 1.16-1.29x at 2048); per-token scales
#: stay on the Triton kernel, faster there at P = 1 and 2 (its rotated row parked once against this kernel's two
#: rotations).
MIN_M = 1024


@gluon.jit
def _rotate(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols, NL: gl.constexpr):
    """Channel-scale and rotate the tile v [BR, 128] (group g) by partition p's NL layers."""
    v = v * gl.expand_dims(gl.load(cs_ptr + p * K + g * _G + cols).to(gl.float32), 0)
    for r in gl.static_range(NL):
        off = (p * NL + r) * K + g * _G + cols
        mate, _ = gl.broadcast(gl.expand_dims(gl.load(mate_ptr + off), 0), v)
        c = gl.expand_dims(gl.load(cos_ptr + off), 0)
        s = gl.expand_dims(gl.load(sin_ptr + off), 0)
        v = c * v + s * gl.gather(v, mate, 1)
    return v


@gluon.jit
def _tile(t, P, G, RB, CHUNKED: gl.constexpr):
    """Tile t's (partition, group, row block), partition fastest so a tile's P partitions re-read its rows from L2
    side by side. Strided (a program's tiles ``programs`` apart): then group — consecutive tiles of a program are
    of different groups. ``CHUNKED`` (a program's tiles a contiguous run): then row block — a program keeps one
    group's rotation tables (P x 12 KB) in L1 across its tiles."""
    if CHUNKED:
        return t % P, t // (P * RB), (t // P) % RB
    return t % P, (t // P) % G, t // (P * G)


@gluon.jit
def _load_tile(x_ptr, stride_x, t, P, G, RB, M, BR: gl.constexpr, LQ: gl.constexpr, CHUNKED: gl.constexpr):
    """Tile t's raw activations [BR, 128] in LQ; zeros past M."""
    _, g, rb = _tile(t, P, G, RB, CHUNKED)
    rows = rb * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, LQ))
    cols = gl.arange(0, _G, layout=gl.SliceLayout(0, LQ))
    offs = gl.expand_dims(rows.to(gl.int64), 1) * stride_x + g * _G + gl.expand_dims(cols, 0)
    return gl.load(x_ptr + offs, mask=gl.expand_dims(rows < M, 1), other=0)


@gluon.jit
def _rotate_quant_kernel(x_ptr, stride_x, mate_ptr, cos_ptr, sin_ptr, cs_ptr, q_ptr, as_ptr, rs_ptr, amax_ptr,
                         inv_qmax, M, K, G, P, T, DT: gl.constexpr, NL: gl.constexpr, ELEM: gl.constexpr,
                         HW: gl.constexpr, PASS: gl.constexpr, RPT: gl.constexpr, NW: gl.constexpr,
                         FAST: gl.constexpr, CHUNKED: gl.constexpr):
    """Persistent: program i takes tiles i, i + programs, ... or (``CHUNKED``) the i-th contiguous run of
    ceil(T / programs) tiles."""
    BR: gl.constexpr = 32 * RPT
    LR: gl.constexpr = gl.BlockedLayout([RPT, _G // NW], [32, 1], [1, NW], [0, 1])  # the rotation's
    LQ: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [NW, 1], [1, 0])  # loads, stores and the quantiser's
    cols = gl.arange(0, _G, layout=gl.SliceLayout(0, LQ))
    cols_r = gl.arange(0, _G, layout=gl.SliceLayout(0, LR))
    RB = T // (P * G)
    if CHUNKED:
        run = gl.cdiv(T, gl.num_programs(0))
        first, end, step = gl.program_id(0) * run, gl.minimum(gl.program_id(0) * run + run, T), 1
    else:
        first, end, step = gl.program_id(0), T, gl.num_programs(0)
    for t in range(first, end, step):
        raw = _load_tile(x_ptr, stride_x, t, P, G, RB, M, BR, LQ, CHUNKED)
        p, g, rb = _tile(t, P, G, RB, CHUNKED)
        rows = rb * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, LQ))
        rmask = rows < M
        v = to_f32(gl.convert_layout(raw, LR), DT)
        v = gl.convert_layout(_rotate(v, mate_ptr, cos_ptr, sin_ptr, cs_ptr, p, g, K, cols_r, NL), LQ)
        abase = (p * M + rows).to(gl.int64) * G
        if PASS == 1:
            gl.store(amax_ptr + abase + g, gl.max(gl.abs(v), axis=1), mask=rmask)
        else:
            if PASS == 0:
                scale = gl.max(gl.abs(v), axis=1) * inv_qmax
                gl.store(as_ptr + abase + g, scale, mask=rmask)
            else:  # the row's amax: its groups' in group order from 0, as the Triton kernel's walk (max is exact)
                amax = gl.zeros_like(rows).to(gl.float32)
                for c in range(0, G):
                    amax = gl.maximum(amax, gl.load(amax_ptr + abase + c, mask=rmask, other=0.0))
                scale = amax * inv_qmax
                gl.store(as_ptr + p * M + rows, scale, mask=rmask & (g == 0))
            quant_store(v, scale, q_ptr, rs_ptr, p, rows, rmask, g, M, K, G, cols, ELEM, HW, FAST)


def measured_on(device: torch.device | str) -> bool:
    """Whether ``rotate_quant`` takes this kernel by default on ``device``: an NVIDIA GPU of the class it was measured
    on (sm_90) outside the interpreter. Named configs run on any NVIDIA GPU (:func:`rotate_quant` says why not)."""
    device = torch.device(device)
    return (device.type == "cuda" and not triton_interpreted() and torch.version.cuda is not None
            and torch.cuda.get_device_capability(device) >= (9, 0))


def rotate_quant(x, pairs, theta, channel_scales, elem: str, granularity: str, hw: bool, out, cfg: str):
    """``rotate_quant`` (the contract of :mod:`.reference`) on this kernel in launch config ``cfg``; returns
    {"A", "AS", "RS"} (``out``: preallocated buffers by those names). Per-token mode in two launches over an fp32
    [P, M, G] buffer of group amaxes. Raises :class:`BackendUnavailableError` where Gluon cannot run."""
    from radiance_kernels.ops.stream.triton import _DT, givens_tables_cached

    if triton_interpreted() or x.device.type != "cuda" or torch.version.cuda is None:
        raise BackendUnavailableError(f"rotate_quant cfg {cfg!r} is the Gluon prefill kernel: it needs an NVIDIA GPU "
                                      f"outside the Triton interpreter (got a {x.device.type} tensor, "
                                      f"TRITON_INTERPRET={'1' if triton_interpreted() else 'unset'})")
    P, M, K = pairs.shape[0], x.shape[0], x.shape[1]
    a_shape, as_shape, rs_shape = reference.output_shapes(P, M, K, granularity)
    out = output_buffers(out, {"A": (a_shape, reference.code_dtype(elem)), "AS": (as_shape, torch.float32),
                               "RS": (rs_shape, torch.float32)}, x.device)
    if M == 0:
        return out
    mate, cos, sin = givens_tables_cached(pairs, theta)
    G, NL = K // _G.value, pairs.shape[1]
    token = granularity == "token"
    amax = torch.empty((P, M, G), dtype=torch.float32, device=x.device) if token else out["RS"]  # RS: never read
    c = CONFIGS[cfg]
    xv = x.view(torch.int16) if x.dtype == torch.bfloat16 else x
    T = P * G * triton.cdiv(M, 32 * c["RPT"])
    grid = (min(T, c["ctas"] * torch.cuda.get_device_properties(x.device).multi_processor_count),)
    for pass_ in (1, 2) if token else (0,):
        _rotate_quant_kernel[grid](
            xv, x.stride(0), mate, cos, sin, channel_scales.contiguous(), out["A"], out["AS"], out["RS"], amax,
            reference.INV_QMAX[elem], M, K, G, P, T, DT=_DT[x.dtype], NL=NL, ELEM=int(elem == "int8"), HW=hw,
            PASS=pass_, RPT=c["RPT"], NW=c["num_warps"], FAST=c["fast"],
            CHUNKED=c["chunked"], num_warps=c["num_warps"], maxnreg=c.get("maxnreg"),
            enable_fp_fusion=False)
    return out
