import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radiance_kernels.formats import mx


def test_e2m1_grid_and_ties():
    x = torch.tensor([0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -0.1, -6.0, float("nan"), -float("inf")])
    got = mx.e2m1_decode(mx.e2m1_encode(x)).tolist()
    assert got[:10] == [0, 0, 1, 1, 2, 2, 4, 4, 6, 6]
    assert got[10] == 0 and mx.e2m1_encode(x)[10] == 0  # zero result is +0
    assert got[11] == -6 and got[12] == 0 and got[13] == -6
    codes = torch.arange(16, dtype=torch.uint8)
    dec = mx.e2m1_decode(codes)
    assert dec.tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    back = mx.e2m1_encode(dec)
    assert torch.equal(back, torch.where(codes == 8, 0, codes))


@settings(max_examples=300, deadline=None)
@given(st.floats(-8, 8, width=32))
def test_e2m1_nearest(v):
    got = mx.e2m1_decode(mx.e2m1_encode(torch.tensor([v]))).item()
    grid = torch.tensor(mx.E2M1_VALUES + tuple(-g for g in mx.E2M1_VALUES), dtype=torch.float64)
    assert abs(got - v) <= (grid - v).abs().min().item() + 0.0


def test_e8m0_matches_torch_decode():
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = mx.e8m0_decode(b)
    theirs = b.view(torch.float8_e8m0fnu).float()
    assert torch.equal(ours[:255], theirs[:255]) and torch.isnan(ours[255]) and torch.isnan(theirs[255])
    assert torch.equal(mx.e8m0_encode(ours[:255]), b[:255])
    assert mx.e8m0_encode(torch.tensor([3.0, 0.0])).tolist() == [128, 0]  # floor, not torch's round-up


def test_fp4_pack_layout():
    codes = torch.tensor([[1, 2, 3, 4]], dtype=torch.uint8)
    p = mx.pack_fp4(codes)
    assert p.tolist() == [[0x21, 0x43]]
    assert p.view(torch.float4_e2m1fn_x2).shape == (1, 2)
    assert torch.equal(mx.unpack_fp4(p), codes)


def test_ocp_rule_exponent():
    w = torch.zeros(1, 64)
    w[0, 0] = 5.0  # floor(log2 5) - 2 = 0
    w[0, 33] = -0.7  # floor(log2 .7) - 2 = -3
    packed, scales = mx.quantize_mxfp4(w, "ocp")
    assert scales.tolist() == [[127, 124]]
    deq = mx.dequantize_mxfp4(packed, scales)
    assert deq[0, 0] == 4.0 and deq[0, 33] == -0.75  # 5 → tie to 4; .7/2^-3 = 5.6 → 6


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_mse_never_worse_than_ocp(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 128, generator=g) * torch.exp(torch.randn(8, 1, generator=g))
    w[0, :32] = 0
    errs = {}
    for rule in ("ocp", "mse"):
        p, s = mx.quantize_mxfp4(w, rule)
        assert p.shape == (8, 64) and s.shape == (8, 4) and p.dtype == s.dtype == torch.uint8
        d = mx.dequantize_mxfp4(p, s).double()
        errs[rule] = ((d - w.double()) ** 2).reshape(8, 4, 32).sum(-1)
        assert torch.all(d[0, :32] == 0)
    assert torch.all(errs["mse"] <= errs["ocp"] + 1e-12)
    # mse candidates never clip more than one binade: the no-clip exponent or one finer
    p, s = mx.quantize_mxfp4(w, "mse")
    _, s0 = mx.quantize_mxfp4(w, "ocp")
    assert torch.all((s.int() - s0.int()).abs() <= 1)


def test_dequant_exact_round_trip():
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (4, 64), generator=g).to(torch.uint8)
    scales = torch.randint(110, 140, (4, 2), generator=g).to(torch.uint8)
    w = mx.dequantize_mxfp4(mx.pack_fp4(codes), scales)
    p2, s2 = mx.quantize_mxfp4(w, "ocp")
    assert torch.equal(mx.dequantize_mxfp4(p2, s2), w)
