import pytest
import torch

from radiance_vllm import stream


class Consumer(torch.nn.Module):
    prefix = "model.layers.0.mlp.gate_up_proj"
    rot_bounds_list = [0, 128, 192]  # two rotation runs


def test_handed_activations_are_used_only_for_their_tensor():
    layer, x = Consumer(), torch.zeros(3, 128)
    A, S = torch.zeros(2, 3, 128, dtype=torch.uint8), torch.zeros(2, 3)
    stream._hand_over(layer, x, A, S, S)
    assert stream.take(layer, torch.zeros(3, 128)) is None
    assert stream.take(layer, x)[0] is A
    assert stream.take(layer, x) is None  # consumed once


def test_partition_count_guard_raises_instead_of_reading_past_the_buffer():
    layer, x = Consumer(), torch.zeros(3, 128)
    stream._hand_over(layer, x, torch.zeros(1, 3, 128, dtype=torch.uint8), torch.zeros(1, 3), torch.zeros(1, 3))
    with pytest.raises(stream.StreamPartitionError, match="2 rotation partition"):
        stream.take(layer, x)


def test_install_without_the_pattern_raises():
    with pytest.raises(RuntimeError, match="RADIANCE_STREAM=1 but no decoder layer"):
        stream.install(torch.nn.Sequential(torch.nn.Linear(2, 2)))
