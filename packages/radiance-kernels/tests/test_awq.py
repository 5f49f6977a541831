import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radiance_kernels.formats import awq


def _codes(seed, r, n, hi):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hi + 1, (r, n), generator=g, dtype=torch.int32).to(torch.uint8)


def test_awq_order_layout():
    codes = torch.arange(8, dtype=torch.uint8)[None] + 1  # column c holds c + 1
    word = awq.pack_int4(codes).item() & 0xFFFFFFFF
    nibbles = [(word >> (4 * i)) & 15 for i in range(8)]
    assert nibbles == [c + 1 for c in awq.AWQ_ORDER]


def test_bitplane_layout():
    codes = torch.zeros(1, 64, dtype=torch.uint8)
    codes[0, 31] = 16  # bit 31 of word 0: the int32 sign bit
    codes[0, 33] = 17
    _, hi = awq.pack_int5(codes)
    assert hi.tolist() == [[-(2**31), 2]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(1, 3))
def test_round_trips(seed, r, n32):
    c4 = _codes(seed, r, 32 * n32, 15)
    assert torch.equal(awq.unpack_int4(awq.pack_int4(c4)), c4)
    c5 = _codes(seed + 1, r, 32 * n32, 31)
    lo, hi = awq.pack_int5(c5)
    assert lo.dtype == hi.dtype == torch.int32 and hi.shape == (r, n32)
    assert torch.equal(awq.unpack_int5(lo, hi), c5)
    assert torch.equal(awq.unpack_int4(lo), c5 & 15)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([4, 5]), st.booleans())
def test_quantize_grid(seed, bits, pow2):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(256, 64, generator=g) * torch.rand(1, 64, generator=g)  # groups straddle 0, like weights
    codes, zeros, scales = awq.quantize_asym(w, bits, 128, pow2=pow2)
    qmax = 2**bits - 1
    assert codes.shape == (256, 64) and zeros.shape == scales.shape == (2, 64) and scales.dtype == torch.float16
    assert int(codes.max()) <= qmax and int(zeros.max()) <= qmax
    if pow2:
        m, _ = torch.frexp(scales.float())
        assert torch.all(m == 0.5)
    deq = awq.dequantize(codes, zeros, scales, 128)
    s = scales.float().repeat_interleave(128, 0)
    # RTN on the group's grid: half a step inside; the rounded zero point can clip the extremes by
    # at most another half step (a full step with the pow2 projection's doubled range cannot clip).
    err = (deq - w).abs()
    assert torch.all(err <= s * (1 + 1e-3))
    assert ((err <= 0.5 * s * (1 + 1e-3)).float().mean()) > 0.9
    # round trip through the checkpoint tensors
    ck = awq.to_checkpoint(codes, zeros, scales, bits)
    assert ck["qweight"].shape == (256, 8) and ck["qzeros"].shape == (2, 8)
    if bits == 5:
        assert ck["qweight_hi"].shape == (256, 2) and ck["qzeros_hi"].shape == (2, 2)
    c2, z2, s2, b2 = awq.from_checkpoint(ck)
    assert b2 == bits and torch.equal(c2, codes) and torch.equal(z2, zeros) and torch.equal(s2, scales)


def test_matches_paroquant_rule():
    """Independent restatement of UniformAffineQuantizer.pseudo_quantize (fp32 scale) on fp16-exact scales."""
    w = torch.tensor([[-1.0], [0.5], [2.0], [3.0]]).repeat(32, 1)  # K=128, one column: min -1, max 3
    codes, zeros, scales = awq.quantize_asym(w, 4, 128)
    s = 4.0 / 15
    assert scales.item() == pytest.approx(s, rel=1e-3)
    sf = scales.float().item()
    z = min(max(-round(-1.0 / sf), 0), 15)
    assert zeros.item() == z
    exp = [min(max(round(v / sf) + z, 0), 15) for v in (-1.0, 0.5, 2.0, 3.0)]
    assert codes[:4, 0].tolist() == exp


def test_dequantize_zero_not_offset():
    codes = torch.full((128, 8), 3, dtype=torch.uint8)
    zeros = torch.full((1, 8), 3, dtype=torch.uint8)
    scales = torch.full((1, 8), 0.5, dtype=torch.float16)
    assert torch.all(awq.dequantize(codes, zeros, scales) == 0)
