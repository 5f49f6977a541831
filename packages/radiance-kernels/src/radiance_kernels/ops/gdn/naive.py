"""Reference gated delta rule (Qwen3-Next's linear attention): the token-by-token recurrence.

Layouts (batch-major, heads inner): q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv];
state [B, Hv, Dk, Dv] float32. Hv is a multiple of Hk; value head h reads q/k head h // (Hv / Hk)
(grouped heads, i.e. q/k repeat-interleaved to Hv). ``g`` is the per-token log decay (≤ 0 in the model,
``g = -exp(A_log) · softplus(a + dt_bias)``), ``beta`` the write strength (``sigmoid(b)``).

Per head and token t, with q_t, k_t optionally l2-normalised (``x / sqrt(Σx² + 1e-6)``):

    S ← exp(g_t) · S
    S ← S + k_t (beta_t · (v_t − Sᵀ k_t))ᵀ
    o_t = scale · Sᵀ q_t

Packed variable-length input: B = 1 and ``cu_seqlens`` [N + 1] (0 = cu[0] ≤ … ≤ cu[N] = T) marks N
sequences ``[cu[n], cu[n+1])``, each starting from its own state (``initial_state`` / result [N, Hv, Dk, Dv]).
The ops return o [B, T, Hv, Dv] in v's dtype and the final state in float32.
"""

import torch

L2_EPS = 1e-6


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(Σ x² + 1e-6) over the last dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def recurrent(q, k, v, g, beta, initial_state, scale: float, qk_l2norm: bool,
              acc_dtype: torch.dtype = torch.float32, cu_seqlens: torch.Tensor | None = None):
    """The recurrence above, computed in ``acc_dtype``; returns (o in v's dtype, state in ``acc_dtype``)."""
    if cu_seqlens is not None:
        bounds = cu_seqlens.tolist()
        outs, states = [], []
        for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            s0 = None if initial_state is None else initial_state[n:n + 1]
            o, st = recurrent(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], s0, scale, qk_l2norm,
                              acc_dtype)
            outs.append(o)
            states.append(st)
        return torch.cat(outs, 1), torch.cat(states, 0)
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    out_dtype = v.dtype
    q, k = (x.to(acc_dtype).repeat_interleave(Hv // Hk, dim=2) for x in (q, k))
    if qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    v, g, beta = (x.to(acc_dtype) for x in (v, g, beta))
    if initial_state is None:
        state = torch.zeros(B, Hv, Dk, Dv, dtype=acc_dtype, device=v.device)
    else:
        state = initial_state.to(acc_dtype).clone()
    o = torch.empty(B, T, Hv, Dv, dtype=acc_dtype, device=v.device)
    for t in range(T):
        state = state * g[:, t, :, None, None].exp()
        pred = torch.einsum("bhkv,bhk->bhv", state, k[:, t])
        w = beta[:, t, :, None] * (v[:, t] - pred)
        state = state + k[:, t, :, :, None] * w[:, :, None, :]
        o[:, t] = scale * torch.einsum("bhkv,bhk->bhv", state, q[:, t])
    return o.to(out_dtype), state
