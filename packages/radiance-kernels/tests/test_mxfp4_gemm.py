"""radiance::mxfp4_gemm: layout, reference vs an independent fp64 dequant-matmul, Triton vs reference.

Per-token e4m3 activations are built here from formats.e4m3, standing in for rotate_quant's output.
"""

import pytest
import torch
from conftest import FULL_SHAPES, REL, gemm_error

from radiance_kernels import shapes
from radiance_kernels.formats import e4m3, mx
from radiance_kernels.ops.mxfp4_gemm import prepare, unprepare


def acts(P, M, K, kind="normal", seed=0, device="cpu"):
    """(A e4m3 codes, AS per-token, decoded codes); kind="subnormal": most codes subnormal."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(P, M, K, generator=g, device=device) * torch.exp(torch.randn(P, M, 1, generator=g, device=device))
    if kind == "subnormal":
        x[..., ::128] = 3e4
    AS = (x.abs().amax(-1) / 448.0).clamp(min=1e-12).float()
    A = e4m3.encode(x / AS[..., None])
    return A, AS, e4m3.decode(A)


def weights(N, K, rule="mse", seed=1, spread=4, device="cpu"):
    """MXFP4 weights whose block exponents spread over ``2 * spread`` binades."""
    g = torch.Generator(device=device).manual_seed(seed)
    w = torch.randn(N, K // 32, 32, generator=g, device=device)
    w = w * torch.exp2(torch.randint(-2 * spread, 1, (N, K // 32, 1), generator=g, device=device).float())
    return mx.quantize_mxfp4(w.reshape(N, K) * 0.05, rule)


def call(A, AS, w, bounds, band, backend, out=None):
    if out is None:
        return torch.ops.radiance.mxfp4_gemm(A, AS, w.wp, w.ws, bounds, band, backend)
    torch.ops.radiance.mxfp4_gemm_out(out, A, AS, w.wp, w.ws, bounds, band, backend)
    return out


def dequant_matmul(dec, AS, packed, scales, bounds):
    W = mx.dequantize_mxfp4(packed.cpu(), scales.cpu()).double()
    out = torch.empty(dec.shape[1], W.shape[0], dtype=torch.float64)
    for p in range(dec.shape[0]):
        X = dec[p].cpu().double() * AS[p].cpu().double()[:, None]
        out[:, bounds[p]:bounds[p + 1]] = X @ W[bounds[p]:bounds[p + 1]].t()
    return out


def test_prepare_layout_round_trip():
    packed, scales = weights(64, 256)
    w = prepare(packed, scales)
    assert w.wp.shape == (32, 64) and w.wp.dtype == torch.int32 and w.ws.shape == (8, 64)
    p2, s2 = unprepare(w)
    assert torch.equal(p2, packed) and torch.equal(s2, scales)
    codes = mx.unpack_fp4(packed)
    word = w.wp[5, 3].item() & 0xFFFFFFFF  # nibble j of wp[i, n] = code of W[n, 8i + j]
    assert [(word >> (4 * j)) & 15 for j in range(8)] == codes[3, 40:48].tolist()
    assert torch.equal(w.ws, scales.t())


@pytest.mark.parametrize("P", [1, 3])
def test_reference_vs_dequant_matmul(P):
    M, K, N = 9, 256, 96
    bounds = [0, 32, 64, 96] if P == 3 else [0, 96]
    A, AS, dec = acts(P, M, K)
    packed, scales = weights(N, K)
    out = call(A, AS, prepare(packed, scales), bounds, "auto", "reference")
    exact = dequant_matmul(dec, AS, packed, scales, bounds)
    assert gemm_error(out, exact.to(torch.bfloat16))[0] <= 3e-4
    assert gemm_error(out, exact)[0] <= 1.3 * REL


@pytest.mark.parametrize("band", ["decode", "prefill"])
@pytest.mark.parametrize("kind,rule,P", [("normal", "mse", 2), ("subnormal", "ocp", 3), ("normal", "ocp", 1)])
def test_triton_matches_reference(band, kind, rule, P, device):
    M, K, N = 21, 256, 384
    bounds = [0, 128, 256, 384][:P] + [N]
    A, AS, _ = acts(P, M, K, kind=kind, seed=P, device=device)
    if kind == "subnormal":
        assert ((A.cpu().to(torch.int32) & 0x78) == 0).float().mean() > 0.5
    w = prepare(*weights(N, K, rule, device=device))
    ref = call(A, AS, w, bounds, band, "reference")
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
    call(A, AS, w, bounds, band, "triton", out=out)
    r, mx_ = gemm_error(out, ref)
    assert r <= REL and mx_ <= 4 * REL, (r, mx_)


def test_extreme_scales(device):
    """Block exponents near both e8m0 ends whose values stay normal and finite in fp32/bf16
    (2 <= b <= 252; below 2 a GPU may flush the subnormal products)."""
    M, K, N = 4, 128, 32
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 16, (N, K), generator=g).to(torch.uint8)
    scales = torch.randint(0, 3, (N, K // 32), generator=g).to(torch.uint8) + 118
    scales[:2] = 2
    scales[2:4] = 200
    w = prepare(mx.pack_fp4(codes).to(device), scales.to(device))
    A, AS, _ = acts(1, M, K, device=device)
    ref = call(A, AS, w, [0, N], "auto", "reference")
    out = call(A, AS, w, [0, N], "auto", "triton")
    for cols in (slice(0, 2), slice(2, 4), slice(4, N)):
        r, mx_ = gemm_error(out[:, cols], ref[:, cols])
        assert r <= REL and mx_ <= 4 * REL, (cols, r, mx_)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_out_rows_past_m_untouched(backend, device):
    M, K, N = 3, 128, 64
    A, AS, _ = acts(1, M, K, device=device)
    w = prepare(*weights(N, K, device=device))
    buf = torch.full((M + 4, N), -3.0, dtype=torch.bfloat16, device=device)
    call(A, AS, w, [0, N], "auto", backend, out=buf)
    assert torch.all(buf[M:] == -3.0)
    assert torch.equal(buf[:M], call(A, AS, w, [0, N], "auto", backend))


def test_bad_inputs_raise(device):
    A, AS, _ = acts(1, 2, 128, device=device)
    w = prepare(*weights(64, 128, device=device))
    with pytest.raises(ValueError, match="AS"):
        call(A, AS[..., None], w, [0, 64], "auto", "reference")
    with pytest.raises(ValueError, match="uint8"):
        call(A.to(torch.int8), AS, w, [0, 64], "auto", "reference")
    with pytest.raises(ValueError, match="weight_scale"):
        prepare(torch.zeros(64, 64, dtype=torch.uint8), torch.zeros(64, 3, dtype=torch.uint8))


FULL_MS = [1, 5, 8, 16, 40, 64, 128, 1024, 2048, 8192]


def sweep(proj, ms, device):
    """Triton vs reference over ``ms`` for one projection; rows past M untouched."""
    K, N = proj.K, proj.N
    bounds = list(proj.bounds)
    w = prepare(*weights(N, K, device=device))
    for M in ms:
        A, AS, _ = acts(proj.P, M, K, seed=M, device=device)
        ref = call(A, AS, w, bounds, "auto", "reference")
        out = torch.full((M + 3, N), 5.0, dtype=torch.bfloat16, device=device)
        call(A, AS, w, bounds, "auto", "triton", out=out)
        r, mx_ = gemm_error(out[:M], ref)
        assert r <= REL and mx_ <= 4 * REL, (proj, M, r, mx_)
        assert torch.all(out[M:] == 5.0)


def test_sweep_small(device):
    """The full-shape sweep's code path on a small 2-partition shape, both bands."""
    sweep(shapes.Proj("tiny.gate_up", 256, (128, 128), 1, 1), [3, 70], device)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.all_projections(), ids=lambda p: f"tp{p.tp}-{p.name}")
def test_full_shapes(proj):
    sweep(proj, FULL_MS, "cuda")


def test_fed_by_rotate_quant(device):
    """rotate_quant's per-token e4m3 (A, AS) into the GEMM: kernel == reference at the bf16 floor."""
    from radiance_kernels.formats.rotation import random_rotations, rotate

    P, M, K, N, bounds = 3, 5, 128, 192, [0, 64, 128, 192]
    pairs, theta, cs = random_rotations(P, K, seed=2, device=device)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(device)
    A, AS, _ = torch.ops.radiance.rotate_quant(x, pairs, theta, cs, "e4m3", "token", "reference")
    packed, scales = weights(N, K, device=device)
    w = prepare(packed, scales)
    ref = call(A, AS, w, bounds, "auto", "reference")
    out = call(A, AS, w, bounds, "auto", "triton")
    r, mx_ = gemm_error(out, ref)
    assert r <= REL and mx_ <= 4 * REL
    W = mx.dequantize_mxfp4(packed.cpu(), scales.cpu()).double()
    exact = torch.cat([rotate(x.cpu(), pairs[p].cpu(), theta[p].cpu(), cs[p].cpu(), torch.float64)
                       @ W[bounds[p]:bounds[p + 1]].t() for p in range(P)], dim=1)
    assert gemm_error(ref.cpu(), exact)[0] < 0.05


def test_opcheck():
    """Schema, fake tensor and AOT dispatch of both custom ops (what torch.compile in vLLM relies on)."""
    A, AS, _ = acts(2, 3, 256)
    w = prepare(*weights(256, 256))
    args = (A, AS, w.wp, w.ws, [0, 128, 256], "auto", "reference")
    torch.library.opcheck(torch.ops.radiance.mxfp4_gemm.default, args)
    torch.library.opcheck(torch.ops.radiance.mxfp4_gemm_out.default, (torch.zeros(5, 256, dtype=torch.bfloat16), *args))


def test_prefill_default_is_a_loop_config():
    """The MXFP4 kernel has no predeq: its prefill default must not inherit the W4A8 one's."""
    from radiance_kernels.ops.mxfp4_gemm import triton as mx_impl
    from radiance_kernels.ops.w4a8_gemm import triton as w4

    cfg = w4.config(2048, 256, 256, "prefill", False, None, prefill=mx_impl.PREFILL_DEFAULT)
    assert not cfg["predeq"] and not w4.PREFILL[mx_impl.PREFILL_DEFAULT]["predeq"]
