"""The TMA tiles of the Gluon kernels (:mod:`.wgmma`, :mod:`.mma2`): the shared layout a tile lands in and its host
descriptor. A swizzled tile takes Gluon's default for its shape and element (the 128-byte swizzle where its rows
allow: what wgmma reads, and spread banks for hand-read fragments); an unswizzled one is row-major (4-byte words
read by hand, 1-D scale rows)."""

from __future__ import annotations

import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


def layout(block: list[int], dtype, swizzle: bool = True) -> gl.NVMMASharedLayout:
    """The shared layout of a ``block`` tile of ``dtype`` (a Gluon dtype)."""
    if swizzle:
        return gl.NVMMASharedLayout.get_default_for(block, dtype)
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=dtype.primitive_bitwidth, rank=len(block))


def descriptor(x: torch.Tensor, block: list[int], dtype, swizzle: bool = True) -> TensorDescriptor:
    """The TMA descriptor of ``x`` in ``block`` tiles (``block`` Python ints: Gluon's host side takes no constexpr)."""
    return TensorDescriptor(x, list(x.shape), list(x.stride()), block, layout(block, dtype, swizzle))
