"""Test setup for radiance-kernels.

Without a GPU the Triton kernels run in the interpreter (``TRITON_INTERPRET=1`` must be set before any
kernel module is imported). ``RADIANCE_FULL_SHAPES=1`` on a GPU machine runs the 27B-class shapes.
"""

import os

import pytest
import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
FULL_SHAPES = GPU and os.environ.get("RADIANCE_FULL_SHAPES", "") == "1"
DEVICE = "cuda" if GPU else "cpu"


@pytest.fixture
def device() -> str:
    return DEVICE
