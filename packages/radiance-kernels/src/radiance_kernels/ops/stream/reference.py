"""Reference stream producers: the activation producers that feed a rotated linear, in plain torch.

Every function is a sequence of separately rounded IEEE fp32 operations (no fused multiply-add, no
library transcendental), so the Triton kernels reproduce it bit for bit; ``round(v)`` means rounding
to the activation dtype (bf16/fp16: RNE; fp32: identity).

- ``exp(x)``: x clamped to [−104, 89]; n = rint(x·log2e); r = (x − n·ln2_hi) − n·ln2_lo;
  p = Horner of Σ_{k≤7} r^k/k! (mul then add); result (p·2^⌊n/2⌋)·2^(n−⌊n/2⌋) (overflows to inf above
  ~88.7, underflows through the subnormals). Within a few ulp of the true exp.
- ``sigmoid(v) = 1 / (1 + exp(−v))``, ``silu(v) = v / (1 + exp(−v))`` (correctly rounded divisions).
- ``tree(v)``: the sum of a 128-channel group by adjacent pairs, (v0+v1)+(v2+v3)…, 7 levels.

Producers (x, residual, gate [M, K]; weights 1-D in the activation dtype):

- ``add_rms_norm``: residual' = round(x + residual); ss = Σ_g tree(residual'²) summed over groups in
  order; inv = 1 / sqrt(ss / K + eps); hs = round(round(residual'·inv)·w) (vLLM RMSNorm) or
  round((residual'·inv)·(1 + w)) (``gemma=True``, vLLM GemmaRMSNorm). Returns (hs, residual'). The
  norm reads the dtype-rounded sum residual', as vLLM's CUDA fused_add_rms_norm kernel does; vLLM
  0.32's torch-native op normalizes the unrounded fp32 sum instead (~20% of bf16 outputs then differ
  by 1–2 ulp).
- ``silu_mul`` (x = up half, gate = gate half): round(round(silu(gate))·x) (vLLM SiluAndMul: silu
  rounded to the dtype, then the dtype product).
- ``sigmoid_gate``: round(x·round(sigmoid(gate))) (eager ``x * torch.sigmoid(gate)``).
- ``gated_rms_norm`` (gate = z): per 128-channel head, inv = 1 / sqrt(tree(x²)/128 + eps);
  round(((x·inv)·w)·silu(z)) in fp32, rounded once (vLLM RMSNormGated, norm before gate); w is [128]
  (shared by the heads) or [K].

Split partials: x and gate may each come as a split-K GEMM's fp32 partials ``[S, M, K]``
(``radiance::w4a8_gemm_partials``, or a slice of them along K); the producer's input is then their sum in split
order from zero, rounded to bf16 — the GEMM's own output, bit for bit — and bf16 is the activation dtype.
"""

from __future__ import annotations

import torch

from radiance_kernels.formats.rotation import GROUP
from radiance_kernels.ops.rotate_quant.reference import rotate_quant

# fp32-exact constants shared with the kernels
LOG2E = 1.4426950216293335
LN2_HI = 0.693145751953125  # 0x3F317200: n·LN2_HI is exact for |n| < 512
LN2_LO = 1.428606765330187e-06
RINT_MAGIC = 12582912.0  # 1.5·2^23: (v + M) − M rounds |v| < 2^22 to the nearest integer, ties to even
EXP_LO, EXP_HI = -104.0, 89.0
EXP_POLY = (1.0, 1.0, 0.5, 0.1666666716337204, 0.0416666679084301, 0.008333333767950535,
            0.0013888889225199819, 0.00019841270113829523)  # fp32(1/k!)

ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
PARTIALS_DTYPE = torch.bfloat16  # the activation dtype of split partials (the W4A8 GEMM's output)
GATED_KINDS = ("silu_mul", "sigmoid_gate", "gated_rms_norm")


def _f32(v: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float32, device=like.device)


def exp(x: torch.Tensor) -> torch.Tensor:
    x = x.clamp(EXP_LO, EXP_HI)
    n = (x * _f32(LOG2E, x) + _f32(RINT_MAGIC, x)) - _f32(RINT_MAGIC, x)
    r = (x - n * _f32(LN2_HI, x)) - n * _f32(LN2_LO, x)
    p = torch.full_like(r, EXP_POLY[-1])
    for c in reversed(EXP_POLY[:-1]):
        p = p * r + _f32(c, x)
    ni = n.to(torch.int32)
    n1 = ni >> 1
    s1 = ((n1 + 127) << 23).view(torch.float32)
    s2 = ((ni - n1 + 127) << 23).view(torch.float32)
    return (p * s1) * s2


def sigmoid(v: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(v) / (exp(-v) + 1.0)


def silu(v: torch.Tensor) -> torch.Tensor:
    return v / (exp(-v) + 1.0)


def tree(v: torch.Tensor) -> torch.Tensor:
    """[..., 128] → [...]: pairwise sum of adjacent channels, 7 levels."""
    while v.shape[-1] > 1:
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


def rms_inv(ss: torch.Tensor, n: int, eps: float) -> torch.Tensor:
    """1 / sqrt(ss / n + eps), each step a correctly rounded fp32 operation."""
    d = torch.sqrt(ss / _f32(float(n), ss) + _f32(eps, ss))
    return torch.ones_like(d) / d


def _rounded(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return v.to(dtype).to(torch.float32)


def act_dtype(t: torch.Tensor) -> torch.dtype:
    """The activation dtype of an input: its own, or bf16 for split partials ``[S, M, K]``."""
    return PARTIALS_DTYPE if t.dim() == 3 else t.dtype


def activation(t: torch.Tensor) -> torch.Tensor:
    """An input as the activation it stands for: split partials summed in split order from zero, then bf16."""
    if t.dim() == 2:
        return t
    acc = torch.zeros(t.shape[1:], dtype=torch.float32, device=t.device)
    for p in t:
        acc = acc + p
    return acc.to(PARTIALS_DTYPE)


def check_act(t: torch.Tensor, name: str, like: torch.Tensor | None = None) -> None:
    """``t`` is [M, K] bf16/fp16/fp32, or fp32 split partials [S, M, K]; ``like``: the same activation shape and
    dtype as it."""
    partials = t.dim() == 3 and t.dtype == torch.float32 and t.shape[0] >= 1
    if not (partials or t.dim() == 2 and t.dtype in ACT_DTYPES) or t.shape[-1] % GROUP or t.stride(-1) != 1:
        raise ValueError(f"{name} must be a [M, K] bf16/fp16/fp32 tensor (or fp32 split partials [S, M, K]) with "
                         f"unit channel stride and K a multiple of {GROUP}, got {t.dtype} {list(t.shape)} strides "
                         f"{t.stride()}")
    if like is not None and (t.shape[-2:] != like.shape[-2:] or act_dtype(t) != act_dtype(like)):
        raise ValueError(f"{name} must match {act_dtype(like)} {list(like.shape[-2:])}, got {act_dtype(t)} "
                         f"{list(t.shape[-2:])}")


def check_weight(w: torch.Tensor, name: str, sizes: tuple[int, ...], dtype: torch.dtype) -> None:
    if w.dim() != 1 or w.shape[0] not in sizes or w.dtype != dtype or not w.is_contiguous():
        raise ValueError(f"{name} must be a contiguous 1-D {dtype} tensor (the activation dtype) of size "
                         f"{' or '.join(map(str, sizes))}, got {w.dtype} {list(w.shape)}")


def check_add_rms_norm(x, residual, weight) -> None:
    check_act(x, "add_rms_norm: x")
    check_act(residual, "add_rms_norm: residual", like=x)
    check_weight(weight, "add_rms_norm: weight", (x.shape[-1],), act_dtype(x))


def check_gated(kind: str, x, gate, weight) -> None:
    if kind not in GATED_KINDS:
        raise ValueError(f"gated: kind must be one of {GATED_KINDS}, got {kind!r}")
    check_act(x, f"{kind}: x")
    check_act(gate, f"{kind}: gate", like=x)
    if kind == "gated_rms_norm":
        if weight is None:
            raise ValueError("gated_rms_norm: weight is required")
        check_weight(weight, "gated_rms_norm: weight", (GROUP, x.shape[-1]), act_dtype(x))
    elif weight is not None:
        raise ValueError(f"{kind}: takes no weight")


def add_rms_norm(x, residual, weight, eps: float, gemma: bool) -> tuple[torch.Tensor, torch.Tensor]:
    check_add_rms_norm(x, residual, weight)
    x = activation(x)
    M, K = x.shape
    dt = x.dtype
    res = (x.float() + residual.float()).to(dt)
    s = res.float().reshape(M, K // GROUP, GROUP)
    ss = torch.zeros(M, dtype=torch.float32, device=x.device)
    for g in range(K // GROUP):
        ss = ss + tree(s[:, g] * s[:, g])
    n = res.float() * rms_inv(ss, K, eps)[:, None]
    w = weight.float()
    hs = (n * (w + 1.0)).to(dt) if gemma else (_rounded(n, dt) * w).to(dt)
    return hs, res


def gated(kind: str, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """silu_mul (x = up, gate = gate half): round(round(silu(gate))·x); sigmoid_gate:
    round(x·round(sigmoid(gate))); gated_rms_norm (gate = z): per-head round(((x·inv)·w)·silu(gate))."""
    check_gated(kind, x, gate, weight)
    x, gate = activation(x), activation(gate)
    dt = x.dtype
    xf, gf = x.float(), gate.float()
    if kind == "silu_mul":
        return (_rounded(silu(gf), dt) * xf).to(dt)
    if kind == "sigmoid_gate":
        return (xf * _rounded(sigmoid(gf), dt)).to(dt)
    M, K = x.shape
    h = xf.reshape(M, K // GROUP, GROUP)
    inv = rms_inv(tree(h * h), GROUP, eps)[..., None]
    w = weight.float().reshape(-1, GROUP)
    return (((h * inv) * w) * silu(gf).reshape(M, K // GROUP, GROUP)).reshape(M, K).to(dt)


def add_rms_norm_rotate_quant(x, residual, weight, eps, gemma, pairs, theta, channel_scales, elem, granularity):
    """The unfused chain: :func:`add_rms_norm` then the reference ``rotate_quant`` of hs."""
    hs, res = add_rms_norm(x, residual, weight, eps, gemma)
    return (hs, res, *rotate_quant(hs, pairs, theta, channel_scales, elem, granularity))


def gated_rotate_quant(kind, x, gate, weight, eps, pairs, theta, channel_scales, elem, granularity):
    """The unfused chain: :func:`gated` then the reference ``rotate_quant``."""
    return rotate_quant(gated(kind, x, gate, weight, eps), pairs, theta, channel_scales, elem, granularity)
