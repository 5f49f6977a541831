import torch

from radiance_kernels.ops.arrivals import counters


def test_one_zeroed_buffer_per_op_device_and_stream(device):
    """One zeroed counter buffer serves every launch of an (op, device, stream); a grid that needs more gets a larger
    zeroed one, which then serves the smaller grids too; another op never shares it."""
    small = counters(device, 8, "a")
    assert counters(device, 8, "a") is small and small.dtype == torch.int32 and not small.any()
    assert counters(device, 8, "b") is not small
    big = counters(device, small.numel() + 1, "a")
    assert big.numel() > small.numel() and not big.any() and counters(device, 8, "a") is big
