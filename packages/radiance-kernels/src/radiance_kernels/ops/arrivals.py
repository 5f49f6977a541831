"""Split-K arrival counters for the kernels whose tile's last program sums the split partials.

A program bumps its tile's counter after storing its partial; the one that sees ``S - 1`` sums the partials in split
order and stores the counter back to 0. So one zeroed buffer per (op, device, stream) serves every launch: no memset
node per call in a CUDA graph. Launches on one stream never overlap (a programmatic dependent touches its counters
only after its grid-dependency wait); those of two streams, or of two ops, get separate buffers.
"""

from __future__ import annotations

import torch

_BUFFERS: dict[tuple, torch.Tensor] = {}


def counters(device, tiles: int, op: str) -> torch.Tensor:
    """``op``'s arrival counters for a grid of ``tiles`` tiles on ``device``'s current stream, all zero; replaced by
    a larger zeroed buffer when a grid needs more."""
    device = torch.device(device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    buf = _BUFFERS.get((op, device, stream))
    if buf is None or buf.numel() < tiles:
        buf = _BUFFERS[op, device, stream] = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
    return buf
