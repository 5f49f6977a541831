"""W4A8 / W5A8 group GEMM kernel (layout and math: :mod:`.reference`).

One kernel, parametrised by constexprs: weight bits (4/5), activation element (e4m3 codes → fp8 x fp8
``tl.dot``; int8 → int8 x int8 ``tl.dot`` with int32 accumulation), activation-scale granularity
(token / group) and the zero-point form:
- in-loop (row-sum correction): per group ``acc += as * (s * t - (s*d) * RS)``, ``t = a · c``;
- ZPE (epilogue): per group ``acc += as * s * t``; after the loop ``acc -= (as*RS) @ (s*d)`` as a
  rank-G fp32 product over the program's groups (3xTF32 tensor-core dot on NVIDIA, ~fp32 accurate
  and far fewer registers than the FMA dot; "ieee" elsewhere).
Each N-block takes its activation partition from the bounds (``n0 >= b1``, ``n0 >= b2``).

Bands (dispatch by M in :func:`gemm`): decode (M <= DECODE_MAX_M, tiles 16..64 x 64) splits the groups
over a second grid axis into an fp32 workspace ``[S, M, N]`` summed in a second stage (deterministic);
prefill tiles 128x128 (8 warps) over M, N in grouped launch order. The loop runs over 128-groups (the
scale group, one fold each) in KS-wide dot steps. The signed weight code ``c = q - 2^(b-1)`` is
converted to e4m3 exactly (fp16 → fp8 hardware convert on GPUs, the integer encoder under the
interpreter). All configs compile for sm_90 (ptxas) with at most ~144 B of spill.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance_kernels.backends import triton_interpreted
from radiance_kernels.ops.w4a8_gemm.reference import GROUP, W4Prepared, check_inputs, check_out
from radiance_kernels.tl.bf16 import to_bf16
from radiance_kernels.tl.e4m3 import e4m3_encode_sw

DECODE_MAX_M = 64
# Runtime ints that vary per call/layer: one compiled kernel for all of them (no 1 / %16 variants).
NO_SPECIALIZE = ["M", "b1", "b2", "groups_per_split"]
_SMS = 132  # H200


@triton.jit
def tile_coords(M, N, b1, b2, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped launch order → (pid_m, pid_n, partition of the N-block: count of bounds b1, b2 <= n0)."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    n0 = pid_n * BN
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    return pid_m, pid_n, part


@triton.jit
def load_nibbles(w_ptr, k0, offs_n, mask_n, N, BK: tl.constexpr, BN: tl.constexpr):
    """[BK, BN] int32 codes from K-packed words ``w [K/8, N]`` (nibble j of row i = k 8i + j), k0 % 8 == 0."""
    rows = k0 // 8 + tl.arange(0, BK // 8)
    words = tl.load(w_ptr + rows[:, None] * N + offs_n[None, :], mask=mask_n[None, :], other=0)
    return tl.reshape((words[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 15, (BK, BN))


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _w4a8_kernel(
    a_ptr, as_ptr, rs_ptr, wq_ptr, wh_ptr, sz_ptr, out_ptr,
    M, N, K, b1, b2, stride_om, groups_per_split,
    BITS: tl.constexpr, INT8: tl.constexpr, GROUP_AS: tl.constexpr, ZPE: tl.constexpr,
    SPLIT: tl.constexpr, HW: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KS: tl.constexpr, BG: tl.constexpr,
    GROUP_M: tl.constexpr, ZPE_PREC: tl.constexpr,
):
    pid_m, pid_n, part = tile_coords(M, N, b1, b2, BM, BN, GROUP_M)
    pid_s = tl.program_id(1)
    G = K // BK
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, KS)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_rows = a_ptr + part.to(tl.int64) * M * K + offs_m.to(tl.int64)[:, None] * K
    rs_rows = rs_ptr + part * M * G + offs_m * G
    if GROUP_AS:
        as_rows = as_ptr + part * M * G + offs_m * G
    else:
        as_rows = as_ptr + part * M + offs_m
    offs_h = tl.arange(0, KS // 32)
    shift_h = tl.arange(0, 32)
    OFF: tl.constexpr = 1 << (BITS - 1)

    g_lo = pid_s * groups_per_split
    g_hi = tl.minimum(g_lo + groups_per_split, G)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for g in range(g_lo, g_hi):
        if INT8:
            t = tl.zeros((BM, BN), dtype=tl.int32)
        else:
            t = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in tl.static_range(0, BK, KS):  # KS-wide steps through the group: smaller weight tiles
            k0 = g * BK + kk
            a = tl.load(a_rows + k0 + offs_k[None, :], mask=mask_m[:, None], other=0)
            c = load_nibbles(wq_ptr, k0, offs_n, mask_n, N, KS, BN)
            if BITS == 5:
                wh = tl.load(wh_ptr + (k0 // 32 + offs_h)[:, None] * N + offs_n[None, :], mask=mask_n[None, :], other=0)
                c = c | (tl.reshape((wh[:, None, :] >> shift_h[None, :, None]) & 1, (KS, BN)) << 4)
            c = c - OFF
            if INT8:
                t = tl.dot(a, c.to(tl.int8), t, out_dtype=tl.int32)
            else:
                if HW:  # integers in [-16, 15] are exact in fp16 and e4m3: one packed convert
                    w8 = c.to(tl.float16).to(tl.float8e4nv)
                else:
                    w8 = e4m3_encode_sw(c.to(tl.float32)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
                t = tl.dot(a.to(tl.float8e4nv, bitcast=True), w8, t)
        t = t.to(tl.float32)
        sz = tl.load(sz_ptr + g * N + offs_n, mask=mask_n, other=0)
        s = (sz & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        if ZPE:
            contrib = t * s[None, :]
        else:
            d = (sz >> 16).to(tl.float32)
            rs = tl.load(rs_rows + g, mask=mask_m, other=0.0)
            contrib = t * s[None, :] - (s * d)[None, :] * rs[:, None]
        if GROUP_AS:
            asg = tl.load(as_rows + g, mask=mask_m, other=0.0)
            acc += asg[:, None] * contrib
        else:
            acc += contrib
    if ZPE:
        for gc in range(g_lo, g_hi, BG):
            offs_g = gc + tl.arange(0, BG)
            mask_g = offs_g < g_hi
            rsa = tl.load(rs_rows[:, None] + offs_g[None, :], mask=mask_m[:, None] & mask_g[None, :], other=0.0)
            if GROUP_AS:
                rsa *= tl.load(as_rows[:, None] + offs_g[None, :], mask=mask_m[:, None] & mask_g[None, :], other=0.0)
            mask_gn = mask_g[:, None] & mask_n[None, :]
            szc = tl.load(sz_ptr + offs_g[:, None] * N + offs_n[None, :], mask=mask_gn, other=0)
            sd = (szc & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * (szc >> 16).to(tl.float32)
            acc -= tl.dot(rsa, sd, input_precision=ZPE_PREC)
    if not GROUP_AS:
        acc *= tl.load(as_rows, mask=mask_m, other=0.0)[:, None]
    mask = mask_m[:, None] & mask_n[None, :]
    if SPLIT:
        tl.store(out_ptr + pid_s.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)
    else:
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], to_bf16(acc, not HW), mask=mask)


def _pow2_at_least(x: int, lo: int) -> int:
    return max(lo, 1 << max(0, (x - 1).bit_length()))


def _block_n(bounds: list[int], want: int) -> int:
    bn = want
    while bn >= 16 and any(b % bn for b in bounds[1:-1]):
        bn //= 2
    if bn < 16:
        raise ValueError(f"w4a8_gemm: partition bounds {list(bounds)} must be multiples of 16")
    return bn


def config(M: int, N: int, K: int, band: str, interp: bool) -> dict:
    """Tile configuration for a band ("decode" / "prefill"); the interpreter gets large, few tiles.

    KS is the k step inside a 128-group: prefill 128x128 tiles step 32 (register budget: at KS=128 the
    unpacked weight tile spills, at 32 the in-loop int4/int5 kernels do not, per ptxas for sm_90)."""
    G = K // GROUP
    if band == "decode":
        bm = _pow2_at_least(min(M, DECODE_MAX_M), 16)
        bn = 128 if interp else 64
        if interp:
            splits = min(2, G)
        else:
            splits = max(1, min(G, (4 * _SMS) // max(1, triton.cdiv(N, bn) * triton.cdiv(M, bm))))
        per = triton.cdiv(G, splits)
        return dict(BM=bm, BN=bn, KS=GROUP, GROUP_M=1, per=per, splits=triton.cdiv(G, per), num_warps=4, num_stages=4)
    if interp:
        return dict(BM=32, BN=128, KS=64, GROUP_M=8, per=G, splits=1, num_warps=8, num_stages=3)
    return dict(BM=128, BN=128, KS=32, GROUP_M=8, per=G, splits=1, num_warps=8, num_stages=3)


def resolve_band(band: str, M: int, op: str) -> str:
    if band == "auto":
        return "decode" if M <= DECODE_MAX_M else "prefill"
    if band not in ("decode", "prefill"):
        raise ValueError(f"{op}: band must be 'auto', 'decode' or 'prefill', got {band!r}")
    return band


def launch(kernel, M: int, N: int, K: int, bounds: list[int], band: str, out: torch.Tensor | None, device, op: str,
           tensors: tuple, **constexprs) -> torch.Tensor:
    """Shared band/tile/partition plumbing: ``kernel(*tensors, dst, M, N, K, b1, b2, stride_om,
    groups_per_split, ..., SPLIT, HW, BM, BN, BK, KS, GROUP_M)``; split-K partials are summed here."""
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError(f"{op}: the triton backend needs contiguous weights (prepare() output, unsliced)")
    if out is None:
        out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    else:
        check_out(out, M, N, op)
    if M == 0:
        return out
    interp = triton_interpreted()
    cfg = config(M, N, K, resolve_band(band, M, op), interp)
    bn = _block_n(bounds, cfg["BN"])
    b = list(bounds) + [N] * (4 - len(bounds))
    split = cfg["splits"] > 1
    dst = torch.empty(cfg["splits"], M, N, dtype=torch.float32, device=device) if split else out
    grid = (triton.cdiv(M, cfg["BM"]) * triton.cdiv(N, bn), cfg["splits"])
    kernel[grid](
        *tensors, dst, M, N, K, b[1], b[2], out.stride(0), cfg["per"],
        SPLIT=split, HW=not interp, BM=cfg["BM"], BN=bn, BK=GROUP, KS=cfg["KS"], GROUP_M=cfg["GROUP_M"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **constexprs,
    )
    if split:
        out[:M].copy_(dst.sum(0))
    return out


def gemm(A, AS, RS, w: W4Prepared, bounds: list[int], zpe: bool, band: str = "auto",
         out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton W4A8/W5A8 GEMM → bf16 [M, N] (or rows < M of ``out``)."""
    P, M, K, N, grouped = check_inputs(A, AS, RS, w, bounds, "w4a8_gemm")
    wh = w.wh if w.bits == 5 else w.wq  # unused pointer for int4
    return launch(
        _w4a8_kernel, M, N, K, bounds, band, out, A.device, "w4a8_gemm",
        (A.contiguous(), AS.contiguous(), RS.contiguous(), w.wq, wh, w.sz),
        BITS=w.bits, INT8=A.dtype == torch.int8, GROUP_AS=grouped, ZPE=zpe, BG=16,
        ZPE_PREC="tf32x3" if torch.version.cuda and A.is_cuda else "ieee",
    )
