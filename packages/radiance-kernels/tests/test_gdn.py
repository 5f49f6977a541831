import math

import pytest
import torch
from conftest import FULL_SHAPES

import radiance_kernels.ops  # noqa: F401  (registers the ops)
from radiance_kernels.ops.gdn import naive

F64 = torch.float64
FP32_REL = 5e-5 if FULL_SHAPES else 1e-5  # fp32 paths: ieee dots on CPU, tf32x3 (~fp32) on the GPU
BF16_REL = 8e-3  # bf16 outputs: a few bf16 ulps of the largest output


def _inputs(B, T, Hk, Hv, Dk, Dv, device, dtype=torch.float32, seed=0):
    """Random q/k/v (in ``dtype``), log decays g in (-0.5, 0], beta in (0, 1), a small initial state."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, Hk, Dk, generator=gen)
    k = torch.randn(B, T, Hk, Dk, generator=gen)
    v = torch.randn(B, T, Hv, Dv, generator=gen)
    g = -0.5 * torch.rand(B, T, Hv, generator=gen)
    beta = torch.rand(B, T, Hv, generator=gen)
    s0 = 0.1 * torch.randn(B, Hv, Dk, Dv, generator=gen)
    return [x.to(dtype).to(device) for x in (q, k, v)] + [x.to(device) for x in (g, beta, s0)]


def _exact(q, k, v, g, beta, s0, scale, l2):
    return naive.recurrent(q.to(F64), k.to(F64), v.to(F64), g, beta, s0, scale, l2, F64)


def _close(got, want, rel):
    """max |got - want| within ``rel`` of max |want| (want is fp64)."""
    assert torch.isfinite(got).all()
    err = (got.to(F64) - want).abs().max().item()
    assert err <= rel * want.abs().max().item(), (err, want.abs().max().item())


CASES = [  # B, T, Hk, Hv, Dk, Dv, chunk, qk_l2norm, dtype, initial state
    (1, 72, 1, 2, 32, 32, 32, True, torch.float32, True),
    (2, 48, 2, 2, 24, 40, 16, False, torch.float32, False),  # Dk, Dv not powers of two: masked tiles
    (1, 80, 1, 2, 64, 32, 64, True, torch.bfloat16, True),
]
if FULL_SHAPES:
    CASES = [(1, 8192, 16, 48, 128, 128, 64, True, torch.bfloat16, True),  # one kernel variant: fast to compile
             (2, 1000, 16, 16, 128, 128, 64, True, torch.bfloat16, True)]


@pytest.mark.parametrize("B,T,Hk,Hv,Dk,Dv,chunk,l2,dtype,has_s0", CASES)
def test_chunk_matches_recurrence(B, T, Hk, Hv, Dk, Dv, chunk, l2, dtype, has_s0, device):
    q, k, v, g, beta, s0 = _inputs(B, T, Hk, Hv, Dk, Dv, device, dtype)
    if not l2:  # keep the un-normalised delta rule contractive: |k|^2 beta < 2
        k = k * Dk**-0.5
    s0 = s0 if has_s0 else None
    scale = Dk**-0.5
    o_ref, s_ref = _exact(q, k, v, g, beta, s0, scale, l2)
    o, s = torch.ops.radiance.gdn_chunk(q, k, v, g, beta, s0, scale, l2, chunk, None, "triton")
    assert o.dtype == dtype and s.dtype == torch.float32
    _close(o, o_ref, FP32_REL if dtype == torch.float32 else BF16_REL)
    _close(s, s_ref, FP32_REL)


def test_chunk_packed_sequences(device):
    """cu_seqlens: each packed sequence runs the recurrence from its own initial state."""
    Hk, Hv, D, C = (16, 48, 128, 64) if FULL_SHAPES else (1, 2, 32, 16)
    lengths = [700, 3, 64, 1300] if FULL_SHAPES else [21, 3, 16, 33]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q, k, v, g, beta, _ = _inputs(1, sum(lengths), Hk, Hv, D, D, device, torch.bfloat16, seed=4)
    s0 = _inputs(len(lengths), 1, Hk, Hv, D, D, device, seed=9)[5]
    scale = D**-0.5
    o_ref, s_ref = naive.recurrent(q, k, v, g, beta, s0.to(F64), scale, True, F64, cu_seqlens=cu)
    o, s = torch.ops.radiance.gdn_chunk(q, k, v, g, beta, s0, scale, True, C, cu, "triton")
    assert s.shape == (len(lengths), Hv, D, D)
    _close(o, o_ref, BF16_REL)
    _close(s, s_ref, FP32_REL)


@pytest.mark.parametrize("T", [1, 3])
def test_recurrent_continues_chunk(T, device):
    """Prefill with gdn_chunk, then decode T tokens with gdn_recurrent == one recurrence over both."""
    B, P, Hk, Hv, D, C = (8, 256, 16, 48, 128, 64) if FULL_SHAPES else (2, 40, 1, 2, 32, 16)
    q, k, v, g, beta, s0 = _inputs(B, P + T, Hk, Hv, D, D, device, torch.bfloat16, seed=3)
    scale = D**-0.5
    o_ref, s_ref = _exact(q, k, v, g, beta, s0, scale, True)
    pre = slice(0, P)
    dec = slice(P, P + T)
    _, s_mid = torch.ops.radiance.gdn_chunk(q[:, pre], k[:, pre], v[:, pre], g[:, pre], beta[:, pre], s0,
                                            scale, True, C, None, "triton")
    s_in = s_mid.clone()
    o, s = torch.ops.radiance.gdn_recurrent(q[:, dec], k[:, dec], v[:, dec], g[:, dec], beta[:, dec], s_mid,
                                            scale, True, "triton")
    assert torch.equal(s_mid, s_in)  # the input state is not modified
    _close(o, o_ref[:, dec], BF16_REL)
    _close(s, s_ref, FP32_REL)


def _adversarial_gate(B, T, H, device):
    """g = -6 per token except the last 16 tokens of every 64 (g = -0.01): each 64-chunk spans ~288 nats,
    and the slow tail keeps the state and the outputs far from zero."""
    g = torch.full((B, T, H), -6.0)
    tail = (torch.arange(T) % 64) >= 48
    g[:, tail] = -0.01
    return g.to(device)


def _segsum(g):
    """seg[i, j] = G_i - G_j = sum of g over (j, i], summed directly (precise however large |G| is)."""
    L = len(g)
    return torch.ones(L, L).tril() @ torch.where(torch.ones(L, L, dtype=torch.bool).tril(-1), g[:, None], 0.0)


def _torch_chunk(q, k, v, g, beta, scale, C, decay):
    """The chunked form of the recurrence in torch for one sequence and head (q, k [T, Dk], v [T, Dv],
    g, beta [T]; fp32), with the intra-chunk decay matrix M_ij = exp(G_i - G_j) (j <= i) from ``decay(g)``."""
    S = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype)
    out = []
    for c0 in range(0, q.shape[0], C):
        Q, K, V, b, gc = q[c0:c0 + C], k[c0:c0 + C], v[c0:c0 + C], beta[c0:c0 + C], g[c0:c0 + C]
        G = gc.cumsum(0)
        M = decay(gc)
        A = torch.tril(b[:, None] * M * (K @ K.T), -1)
        rhs = b[:, None] * V - (b * G.exp())[:, None] * K @ S
        W = torch.linalg.solve_triangular(torch.eye(len(G)) + A, rhs, upper=False, unitriangular=True)
        out.append(scale * ((G.exp()[:, None] * Q) @ S + ((Q @ K.T) * M) @ W))
        S = G[-1].exp() * S + (K * _segsum(gc)[-1].exp()[:, None]).T @ W
    return torch.cat(out)


def _direct_decay(g):
    causal = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp(torch.where(causal, _segsum(g), -math.inf))


def _split_decay(g):
    """The broken form: exp(G_i - c) * exp(c - G_j) around the chunk midpoint, masked by multiplying."""
    G = g.cumsum(0)
    c = G[len(G) // 2]
    causal = torch.ones(len(G), len(G)).tril()
    return torch.exp(G - c)[:, None] * torch.exp(c - G)[None, :] * causal


def test_large_gate_span_stays_finite_and_exact(device):
    """Chunks spanning ~288 nats of decay, the last one partial (padding rows in an adversarial chunk)."""
    B, T, Hk, Hv, D, C = (1, 8190, 16, 48, 128, 64) if FULL_SHAPES else (1, 120, 1, 2, 32, 64)
    q, k, v, _, beta, s0 = _inputs(B, T, Hk, Hv, D, D, device, seed=5)
    g = _adversarial_gate(B, T, Hv, device)
    scale = D**-0.5
    o_ref, s_ref = _exact(q, k, v, g, beta, s0, scale, True)
    o, s = torch.ops.radiance.gdn_chunk(q, k, v, g, beta, s0, scale, True, C, None, "triton")
    _close(o, o_ref, FP32_REL)
    _close(s, s_ref, FP32_REL)


def test_split_form_overflows_where_direct_form_does_not():
    T, D, C = 128, 32, 64
    q, k, v, _, beta, _ = _inputs(1, T, 1, 1, D, D, "cpu", seed=5)
    g = _adversarial_gate(1, T, 1, "cpu")
    q, k = naive.l2norm(q[0, :, 0]), naive.l2norm(k[0, :, 0])
    v, g, beta = v[0, :, 0], g[0, :, 0], beta[0, :, 0]
    seq = (x[None, :, None].to(F64) for x in (q, k, v, g, beta))
    o_ref, _ = naive.recurrent(*seq, None, D**-0.5, False, F64)
    o_direct = _torch_chunk(q, k, v, g, beta, D**-0.5, C, _direct_decay)
    _close(o_direct, o_ref[0, :, 0], 1e-5)
    o_split = _torch_chunk(q, k, v, g, beta, D**-0.5, C, _split_decay)
    assert not torch.isfinite(o_split).all()


def test_bad_inputs():
    q, k, v, g, beta, s0 = _inputs(1, 8, 1, 2, 16, 16, "cpu")
    with pytest.raises(ValueError, match=r"beta must be \[B, T, Hv\]"):
        torch.ops.radiance.gdn_chunk(q, k, v, g, beta[:, :4], s0, 1.0, True, 16, None, "reference")
    with pytest.raises(ValueError, match="state must be float32"):
        torch.ops.radiance.gdn_recurrent(q, k, v, g, beta, s0.double(), 1.0, True, "reference")
    with pytest.raises(ValueError, match="Hv a multiple of Hk"):
        v3, g3, b3 = v[:, :, [0, 0, 0]], g[..., [0, 0, 0]], beta[..., [0, 0, 0]]
        q2, k2 = q[:, :, [0, 0]], k[:, :, [0, 0]]
        torch.ops.radiance.gdn_chunk(q2, k2, v3, g3, b3, None, 1.0, True, 16, None, "reference")
    with pytest.raises(ValueError, match="cu_seqlens must be int32/int64"):
        torch.ops.radiance.gdn_chunk(q, k, v, g, beta, None, 1.0, True, 16, torch.tensor([0, 8.0]), "reference")
    with pytest.raises(ValueError, match=r"state must be float32 \[N, Hv, Dk, Dv\] = \(2,"):
        torch.ops.radiance.gdn_chunk(q, k, v, g, beta, s0, 1.0, True, 16, torch.tensor([0, 3, 8]), "reference")
    with pytest.raises(ValueError, match="chunk must be one of"):
        torch.ops.radiance.gdn_chunk(q, k, v, g, beta, s0, 1.0, True, 48, None, "reference")


class _GatedDeltaMixer(torch.nn.Module):
    """The GDN core as Qwen3-Next wires it: in_proj_ba (skinny GEMM) → beta, g → gated delta rule."""

    def __init__(self, hidden, Hk, Hv, D, backend):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.w_ba = torch.nn.Parameter((torch.randn(2 * Hv, hidden, generator=gen) * hidden**-0.5).bfloat16())
        self.A_log = torch.nn.Parameter(torch.rand(Hv, generator=gen))
        self.dt_bias = torch.nn.Parameter(torch.randn(Hv, generator=gen))
        self.scale, self.backend = D**-0.5, backend

    def forward(self, x, q, k, v):
        b, a = torch.ops.radiance.skinny_gemm(x, self.w_ba, self.backend).float().chunk(2, dim=-1)
        beta = b.sigmoid()[None]
        g = (-self.A_log.exp() * torch.nn.functional.softplus(a + self.dt_bias))[None]
        return torch.ops.radiance.gdn_chunk(q, k, v, g, beta, None, self.scale, True, 16, None, self.backend)


def test_torch_compile_fullgraph(device):
    T, Hk, Hv, D, hidden = 24, 1, 2, 16, 64
    q, k, v, *_ = _inputs(1, T, Hk, Hv, D, D, device, torch.bfloat16)
    x = torch.randn(T, hidden).bfloat16().to(device)
    for backend in ("reference", "triton"):
        mixer = _GatedDeltaMixer(hidden, Hk, Hv, D, backend).to(device)
        with torch.no_grad():
            eager = mixer(x, q, k, v)
            compiled = torch.compile(mixer, fullgraph=True, backend="aot_eager")(x, q, k, v)
        for e, c in zip(eager, compiled, strict=True):
            assert torch.equal(e, c)
