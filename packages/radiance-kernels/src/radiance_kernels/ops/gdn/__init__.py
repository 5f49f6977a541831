"""``radiance::gdn_chunk`` (prefill) and ``radiance::gdn_recurrent`` (decode): the gated delta rule.

Layouts (see :mod:`.naive` for the math): q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv] (Hv a multiple of Hk);
g (log decay, ≤ 0), beta [B, T, Hv]; states [B, Hv, Dk, Dv] float32. Both return
(o [B, T, Hv, Dv] in v's dtype, final state float32); the input state is not modified.
``qk_l2norm`` l2-normalises q and k per head inside the op (Qwen3-Next sets it); ``scale`` multiplies
q (Qwen3-Next: Dk^-0.5). ``chunk`` (16, 32 or 64) is gdn_chunk's tile length; the
reference backend is the plain recurrence for both ops. gdn_chunk also takes packed variable-length
sequences: B = 1, ``cu_seqlens`` int32/int64 [N + 1] with 0 = cu[0] ≤ … ≤ cu[N] = T (not checked on
the device), states [N, Hv, Dk, Dv].
"""

import torch

from radiance_kernels.ops.gdn import naive
from radiance_kernels.ops.registry import implementation, register_op

FLOATS = (torch.float32, torch.bfloat16)
CHUNKS = (16, 32, 64)  # 128 needs ~384 KB of shared memory on Hopper


def _reference_chunk(q, k, v, g, beta, initial_state, scale, qk_l2norm, chunk, cu_seqlens):
    return naive.recurrent(q, k, v, g, beta, initial_state, scale, qk_l2norm, cu_seqlens=cu_seqlens)


def _triton_chunk(q, k, v, g, beta, initial_state, scale, qk_l2norm, chunk, cu_seqlens):
    from radiance_kernels.ops.gdn import chunk as impl

    return impl.chunk(q, k, v, g, beta, initial_state, scale, qk_l2norm, chunk, cu_seqlens)


def _triton_recurrent(q, k, v, g, beta, state, scale, qk_l2norm):
    from radiance_kernels.ops.gdn import fused_recurrent as impl

    return impl.recurrent(q, k, v, g, beta, state, scale, qk_l2norm)


register_op("gdn_chunk", 1, reference=_reference_chunk, triton=_triton_chunk)
register_op("gdn_recurrent", 1, reference=naive.recurrent, triton=_triton_recurrent)


def _check(op: str, q, k, v, g, beta, state, cu_seqlens=None) -> None:
    """Raise naming the tensor when a shape or dtype does not fit the layouts above."""
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"{op}: q and k must both be [B, T, Hk, Dk], "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    B, T, Hk, Dk = q.shape
    if v.dim() != 4 or v.shape[:2] != (B, T) or v.shape[2] % Hk:
        raise ValueError(f"{op}: v must be [B={B}, T={T}, Hv, Dv] with Hv a multiple of Hk={Hk}, "
                         f"got {tuple(v.shape)}")
    Hv, Dv = v.shape[2], v.shape[3]
    for name, x in (("g", g), ("beta", beta)):
        if x.shape != (B, T, Hv):
            raise ValueError(f"{op}: {name} must be [B, T, Hv] = {(B, T, Hv)}, got {tuple(x.shape)}")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if x.dtype not in FLOATS:
            raise TypeError(f"{op}: {name} must be one of {FLOATS}, got {x.dtype}")
    N = B
    if cu_seqlens is not None:
        if B != 1 or cu_seqlens.dim() != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{op}: cu_seqlens must be int32/int64 [N + 1] with B = 1, got B={B}, "
                             f"cu_seqlens {cu_seqlens.dtype} {tuple(cu_seqlens.shape)}")
        N = cu_seqlens.shape[0] - 1
    if state is not None and (state.shape != (N, Hv, Dk, Dv) or state.dtype != torch.float32):
        raise ValueError(f"{op}: state must be float32 [N, Hv, Dk, Dv] = {(N, Hv, Dk, Dv)}, "
                         f"got {state.dtype} {tuple(state.shape)}")


def _fake_outputs(q, v, cu_seqlens=None):
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return torch.empty_like(v), v.new_empty((N, v.shape[2], q.shape[3], v.shape[3]), dtype=torch.float32)


@torch.library.custom_op("radiance::gdn_chunk", mutates_args=())
def gdn_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              initial_state: torch.Tensor | None, scale: float, qk_l2norm: bool, chunk: int,
              cu_seqlens: torch.Tensor | None, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check("gdn_chunk", q, k, v, g, beta, initial_state, cu_seqlens)
    if chunk not in CHUNKS:
        raise ValueError(f"gdn_chunk: chunk must be one of {CHUNKS}, got {chunk}")
    impl = implementation("gdn_chunk", backend, v.device)
    return impl(q, k, v, g, beta, initial_state, scale, qk_l2norm, chunk, cu_seqlens)


@gdn_chunk.register_fake
def _(q, k, v, g, beta, initial_state, scale, qk_l2norm, chunk, cu_seqlens, backend):
    _check("gdn_chunk", q, k, v, g, beta, initial_state, cu_seqlens)
    return _fake_outputs(q, v, cu_seqlens)


@torch.library.custom_op("radiance::gdn_recurrent", mutates_args=())
def gdn_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                  state: torch.Tensor, scale: float, qk_l2norm: bool,
                  backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check("gdn_recurrent", q, k, v, g, beta, state)
    return implementation("gdn_recurrent", backend, v.device)(q, k, v, g, beta, state, scale, qk_l2norm)


@gdn_recurrent.register_fake
def _(q, k, v, g, beta, state, scale, qk_l2norm, backend):
    _check("gdn_recurrent", q, k, v, g, beta, state)
    return _fake_outputs(q, v)
