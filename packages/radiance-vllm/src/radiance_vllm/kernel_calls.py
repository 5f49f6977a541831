"""The one module that calls ``torch.ops.radiance`` (radiance-kernels); importing it checks the manifest.

Each function is a thin, typed call of one op with this process's backend; shapes follow the ops' docs:
``rotate_quant`` turns x [M, K] into R rotated+quantized copies (A [R, M, K], AS, RS); the GEMMs take
those plus the prepared weights and the run bounds [R + 1], and return [M, N] in bf16 (or, at decode, the
split-K partials [S, M, N] in fp32 for a fused producer to sum).
"""

from __future__ import annotations

import torch

from radiance_vllm import check_kernels

check_kernels()

from radiance_kernels.ops.mxfp4_gemm import MXPrepared  # noqa: E402
from radiance_kernels.ops.mxfp4_gemm import prepare as _prepare_mxfp4  # noqa: E402
from radiance_kernels.ops.stream.reference import activation as _activation  # noqa: E402
from radiance_kernels.ops.w4a8_gemm import DECODE_MAX_M  # noqa: E402
from radiance_kernels.ops.w4a8_gemm import prepare as _prepare_w4a8  # noqa: E402
from radiance_vllm.knobs import KnobError, settings  # noqa: E402


def prepare_w4a8(qweight, qzeros, scales, qweight_hi=None, qzeros_hi=None):
    """AWQ checkpoint tensors → the w4a8 kernel's weight layout (once per layer, at load)."""
    return _prepare_w4a8(qweight, qzeros, scales, qweight_hi, qzeros_hi)


def act_element(rows: int) -> str:
    """The paroquant activation element of a call on ``rows`` tokens: ``RADIANCE_PQ_DECODE_ACT`` where set and the
    call is in the decode band (``rows <= DECODE_MAX_M``), else ``RADIANCE_PQ_ACT``. Chosen per call from its row
    count, so a request's prefill and its decode steps may quantize with different elements, and a decode token
    batched with a long prefill chunk takes the prefill's. A compiled forward is traced once for every batch size
    (vLLM drops the shape guards), which would fix the choice at the traced size: refused there, by name."""
    s = settings()
    if s.pq_decode_act == "same":
        return s.pq_act
    if torch.compiler.is_compiling():
        raise KnobError("RADIANCE_PQ_DECODE_ACT chooses each call's activation element by its row count, which a "
                        "compiled forward (one trace for every batch size) would fix at the traced size: serve with "
                        "--enforce-eager, as the fused producers need")
    return s.pq_decode_act if rows <= DECODE_MAX_M else s.pq_act


def rotate_quant(x: torch.Tensor, pairs, theta, scales, elem: str, granularity: str, backend: str):
    return torch.ops.radiance.rotate_quant(x, pairs, theta, scales, elem, granularity, backend)


def w4a8_gemm(A, AS, RS, w, bounds: list[int], zpe: bool, backend: str) -> torch.Tensor:
    return torch.ops.radiance.w4a8_gemm(A, AS, RS, w.wq, w.wh, w.sz, bounds, w.bits, zpe, "auto", backend)


#: the most tokens a GEMM may leave as split partials (the decode band)
PARTIALS_MAX_M = DECODE_MAX_M


def w4a8_gemm_partials(A, AS, RS, w, bounds: list[int], zpe: bool, backend: str) -> torch.Tensor:
    """The decode GEMM's fp32 split-K partials [S, M, N], unreduced (a fused producer sums them)."""
    return torch.ops.radiance.w4a8_gemm_partials(A, AS, RS, w.wq, w.wh, w.sz, bounds, w.bits, zpe, backend)


def split_sum(parts: torch.Tensor) -> torch.Tensor:
    """Split partials as the producers read them: summed in split order, rounded to bf16 (the GEMM's output)."""
    return _activation(parts)


def skinny_gemm(x: torch.Tensor, w: torch.Tensor, backend: str, after: torch.Tensor | None = None) -> torch.Tensor:
    """bf16 x [M, K] @ w [N, K].T for tiny N (split-K, deterministic), bf16 [M, N]; ``after``: the output of the GEMM
    that ran on x's producer's activations just before (the overlap form, the same bits)."""
    return torch.ops.radiance.skinny_gemm(x, w, backend, after)


def prepare_mxfp4(weight_packed, weight_scale) -> MXPrepared:
    """``weight_packed [N, K/2]`` + ``weight_scale [N, K/32]`` (uint8) → the MXFP4 kernel's layout."""
    return _prepare_mxfp4(weight_packed, weight_scale)


def mxfp4_slice(w: MXPrepared, n0: int, n1: int) -> MXPrepared:
    return MXPrepared(w.wp[:, n0:n1], w.ws[:, n0:n1])


def mxfp4_gemm(A, AS, w: MXPrepared, bounds: list[int], backend: str) -> torch.Tensor:
    return torch.ops.radiance.mxfp4_gemm(A, AS, w.wp, w.ws, bounds, "auto", backend)
