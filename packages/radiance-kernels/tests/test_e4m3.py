import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radiance_kernels.formats import e4m3


def _dense_sample() -> torch.Tensor:
    """Every 97th float32 bit pattern plus all specials (the full 2^32 sweep is a gate)."""
    bits = torch.arange(-(1 << 31), (1 << 31) - 1, 97 * 16, dtype=torch.int64).to(torch.int32)
    specials = torch.tensor([0.0, -0.0, 448.0, -448.0, 464.0, 480.0, 2.0**-9, 2.0**-10, 3 * 2.0**-11,
                             float("inf"), -float("inf"), float("nan")])
    return torch.cat([bits.view(torch.float32), specials])


def test_encode_matches_wrapped_hardware_cast():
    x = _dense_sample()
    assert torch.equal(e4m3.encode(x), e4m3.hw_encode_wrapped(x))


def test_rules():
    x = torch.tensor([float("nan"), -0.0, -1e-30, 1e9, -float("inf"), 2.0**-10, 3 * 2.0**-10])
    assert e4m3.encode(x).tolist() == [0, 0, 0, 0x7E, 0xFE, 0, 2]


def test_decode_exact_and_round_trip():
    codes = e4m3.all_finite_codes()
    assert codes.numel() == 254
    dec = e4m3.decode(codes)
    assert torch.equal(dec, codes.view(torch.float8_e4m3fn).float())
    assert torch.equal(e4m3.encode(dec), torch.where(codes == 0x80, 0, codes))


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=32))
def test_nearest(v):
    x = torch.tensor([v], dtype=torch.float32)
    got = e4m3.decode(e4m3.encode(x)).double()
    if torch.isnan(x).any():
        assert got.item() == 0
        return
    grid = e4m3.decode(e4m3.all_finite_codes()).double()
    target = x.double().clamp(-448, 448)
    assert (got - target).abs().item() <= (grid - target).abs().min().item()


def test_triton_equals_reference(device):
    x = _dense_sample()[:: 64].to(device)
    enc = torch.ops.radiance.e4m3_encode(x, "triton")
    assert torch.equal(enc.cpu(), e4m3.encode(x.cpu()))
    codes = e4m3.all_finite_codes().to(device)
    assert torch.equal(torch.ops.radiance.e4m3_decode(codes, "triton").cpu(), e4m3.decode(codes.cpu()))
