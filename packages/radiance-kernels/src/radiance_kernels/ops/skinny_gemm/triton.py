"""Split-K bf16 GEMM for tiny N (the GDN gate projections ``in_proj_ba``: N = 48/96, K = 5120, M ≤ 64).

``y[m, n] = Σ_k x[m, k] · w[n, k]``. Grid ``(n_tiles, S)`` with ``S = ceil(K / KSLICE)``: program
``(t, s)`` stages its x slice ``x[:, s·KSLICE : (s+1)·KSLICE]`` once, multiplies it by the matching
``[BN, KSLICE]`` weight tile (bf16 products, exact in fp32; fp32 accumulate) and writes an fp32
partial ``P[s, :, tile]``. It then bumps the tile's arrival counter; the last program to arrive sums
``P[0..S-1]`` in slice order, stores bf16 and zeroes the counter for the next launch
(:func:`radiance_kernels.ops.arrivals.counters`: no memset per call). The sum order is fixed, so the result does
not depend on arrival order (deterministic run to run). Where
:func:`radiance_kernels.backends.programmatic_launch_on` holds it is a programmatic dependent (``WAIT``) that lets the
next launch start as it starts: its launch latency hides behind the launch before it. ``early``: each program loads
its weight tile (a constant, 8 KB at the default tile) before that wait, while the launch before it runs — its DRAM
round trip off the critical path; not yet timed, so off by default (:data:`EARLY`). ``overlap``: ``x`` was written
before the launch ahead of this one, which waited for it (in_proj_ba after in_proj_qkvz's GEMM, both reading the
add+RMSNorm producer's output): the programs load ``x`` and the weights and multiply while that launch finishes, and
wait for it only before their first write — a buffer this launch writes may be one the launch ahead still uses (the
allocator reuses freed memory in stream order), and the next launch's wait then covers both.
"""

import torch
import triton
import triton.language as tl

from radiance_kernels.backends import programmatic_launch_on, triton_interpreted
from radiance_kernels.ops.arrivals import counters
from radiance_kernels.tl.bf16 import to_bf16
from radiance_kernels.tl.pdl import programmatic_start

#: Tile: ``BN`` output columns per program, ``KSLICE`` of K per split, ``num_warps``; whether the weight tile loads
#: before the programmatic wait.
BN, KSLICE, NUM_WARPS, EARLY = 16, 256, 4, False


@triton.jit
def _skinny_kernel(x_ptr, w_ptr, part_ptr, count_ptr, y_ptr, M, N, K, S,
                   BM: tl.constexpr, BN: tl.constexpr, KSLICE: tl.constexpr, INTERP: tl.constexpr,
                   WAIT: tl.constexpr, EARLY: tl.constexpr = False, OVERLAP: tl.constexpr = False):
    tile = tl.program_id(0)
    s = tl.program_id(1)
    rm = tl.arange(0, BM)
    rn = tile * BN + tl.arange(0, BN)
    rk = s * KSLICE + tl.arange(0, KSLICE)
    kmask = rk < K
    w_ptrs = w_ptr + rn[:, None] * K + rk[None, :]
    w_mask = (rn[:, None] < N) & kmask[None, :]
    if EARLY or OVERLAP:  # the weights are constants: loaded while the launch before this one runs
        w = tl.load(w_ptrs, mask=w_mask, other=0.0)
    programmatic_start(WAIT and not OVERLAP, WAIT)
    x_ptrs = x_ptr + rm[:, None] * K + rk[None, :]
    x_mask = (rm[:, None] < M) & kmask[None, :]
    if OVERLAP:  # written before the launch ahead began: read from L2, past any line this SM's L1 kept
        x = tl.load(x_ptrs, mask=x_mask, other=0.0, cache_modifier=".cg")
    else:
        x = tl.load(x_ptrs, mask=x_mask, other=0.0)
        if not EARLY:
            w = tl.load(w_ptrs, mask=w_mask, other=0.0)
    if INTERP:  # the interpreter's bf16 dot is wrong; bf16 products are exact in fp32 anyway
        acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
    else:
        acc = tl.dot(x, tl.trans(w), out_dtype=tl.float32)
    programmatic_start(WAIT and OVERLAP)  # overlap: the launch ahead complete before the first write
    omask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(part_ptr + s * M * N + rm[:, None] * N + rn[None, :], acc, mask=omask)
    tl.debug_barrier()  # every thread's partial is written before the release below
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == S - 1:
        total = tl.zeros([BM, BN], dtype=tl.float32)
        for i in range(S):
            total += tl.load(part_ptr + i * M * N + rm[:, None] * N + rn[None, :], mask=omask, other=0.0)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], to_bf16(total, INTERP), mask=omask)
        tl.store(count_ptr + tile, 0)  # every arrival is in: the counter is free for the next launch


def skinny_gemm(x: torch.Tensor, w: torch.Tensor, bn: int = BN, kslice: int = KSLICE,
                num_warps: int = NUM_WARPS, early: bool | None = None, overlap: bool = False) -> torch.Tensor:
    M, K = x.shape
    N = w.shape[0]
    x = x.contiguous()
    w = w.contiguous()
    S = triton.cdiv(K, kslice)
    tiles = triton.cdiv(N, bn)
    part = torch.empty((S, M, N), dtype=torch.float32, device=x.device)
    y = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    bm = max(16, triton.next_power_of_2(M))
    pdl = programmatic_launch_on(x.device)
    _skinny_kernel[(tiles, S)](x, w, part, counters(x.device, tiles, "skinny_gemm"), y, M, N, K, S,
                               BM=bm, BN=bn, KSLICE=kslice, INTERP=triton_interpreted(), WAIT=pdl,
                               EARLY=EARLY if early is None else early, OVERLAP=overlap, num_warps=num_warps,
                               launch_pdl=pdl)
    return y
