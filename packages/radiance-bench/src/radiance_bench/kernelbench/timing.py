"""Timing inside CUDA graphs, fed from DRAM.

A bench is a list of calls, one per *input set*; the sets together exceed the L2 several times (one
weight inside the cache reads at ~2x DRAM speed — the seeds' trap). The graph replays every set
``loops`` times; a replay is timed with CUDA events and divided by the number of calls in it. Results
are best-of-N and median over replays.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

#: Bytes an input rotation must exceed: several times the H200's 60 MB L2.
DRAM_FED_BYTES = 256 << 20


@dataclass(frozen=True)
class Timing:
    best_us: float
    median_us: float
    reps: int

    def as_dict(self) -> dict:
        return {"best_us": self.best_us, "median_us": self.median_us, "reps": self.reps}


def copies_needed(bytes_per_set: int, floor: int = 2, cap: int = 64) -> int:
    """Input sets so that their total exceeds :data:`DRAM_FED_BYTES`."""
    return max(floor, min(cap, -(-DRAM_FED_BYTES // max(bytes_per_set, 1))))


def graph_time(calls: Sequence[Callable[[], object]], reps: int = 15, min_calls: int = 64) -> Timing:
    """Per-call time of ``calls`` replayed round-robin inside one CUDA graph."""
    loops = max(1, -(-min_calls // len(calls)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile / autotune / allocate outside the capture
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(loops):
            for c in calls:
                c()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (loops * len(calls)))
    del graph
    return Timing(min(times), statistics.median(times), reps)
