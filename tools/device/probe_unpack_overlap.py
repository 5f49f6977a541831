"""H200 probe (session 25): can the blockwise prefill's per-call weight unpack (~10 % of the call at M = 2048, call
153) hide under the library GEMM, run beside it on a second stream?

Per shape (27B-class, TP=1, int4, e4m3 per-group activations, M = 2048; gate_up also 8192), µs in a CUDA graph,
side by side in one run: the served call (``blockwise``: unpack, then a ``_scaled_mm`` per partition); the weights
cut into ``C`` column chunks (C = 2, 4), each chunk's unpack followed by its ``_scaled_mm`` on one stream
(``seqC``), and pipelined (``overlapC``: chunk c + 1's unpack on a side stream beside chunk c's ``_scaled_mm``, so
only the first unpack is exposed); the concurrency alone (``beside``: the whole unpack on the side stream beside the
whole ``_scaled_mm`` on ready operands) and the two alone (``unpack``, ``mm``); the bar's peer (per-tensor
``_scaled_mm``). Chunk c reads partition p's activations for its columns (chunks do not straddle partitions).

    python tools/device/probe_unpack_overlap.py OUT.json

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import itertools
import sys

import torch
from probe_rows import time_calls, write_rows

from radiance_bench.kernelbench import cases
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm.reference import W4Prepared
from radiance_kernels.shapes import projections

E4 = torch.float8_e4m3fn
SHAPES = [("attn.qkv", 2048), ("attn.o_proj", 2048), ("mlp.gate_up", 2048), ("mlp.down", 2048),
          ("mlp.gate_up", 8192)]


def chunks(bounds, C):
    """Column ranges (lo, hi, partition): each partition cut into ceil(C / P) pieces of multiples of 128."""
    P = len(bounds) - 1
    per = max(1, -(-C // P))
    out = []
    for p in range(P):
        lo, hi = bounds[p], bounds[p + 1]
        step = -(-(hi - lo) // per // 128) * 128
        out += [(a, min(a + step, hi), p) for a in range(lo, hi, step)]
    return out


class Chunked:
    """Per-chunk weights and their unpack buffers (allocated once: the side stream writes, the main stream reads)."""

    def __init__(self, w, K, pieces):
        self.pieces = pieces
        self.w = [W4Prepared(w.wq[:, lo:hi].contiguous(), w.wq[:, lo:hi].contiguous(), w.sz[:, lo:hi].contiguous(), 4)
                  for lo, hi, _ in pieces]
        self.w8 = [torch.empty(hi - lo, K, dtype=torch.uint8, device="cuda") for lo, hi, _ in pieces]
        self.sb = [torch.empty(K // 128 * (hi - lo), dtype=torch.float32, device="cuda") for lo, hi, _ in pieces]
        self.K = K

    def unpack(self, c):
        w, w8, sb = self.w[c], self.w8[c], self.sb[c]
        N = w8.shape[0]
        impl._unpack_w8_kernel[(self.K // 128, -(-N // impl.UNPACK_BN))](
            w.wq, w.wq, w.sz, w8, sb, N, self.K, N, N, BITS=4, INT8=False, HW=True, ZFOLD=True, SCALES=False,
            BLOCKS=True, BK=128, BN=impl.UNPACK_BN, num_warps=4)

    def mm(self, c, A, sa, out):
        lo, hi, p = self.pieces[c]
        G = self.K // 128
        torch._scaled_mm(A[p].view(E4), self.w8[c].view(E4).t(), scale_a=sa[p].t(),
                         scale_b=self.sb[c].view(G, hi - lo), out_dtype=torch.bfloat16, out=out[:, lo:hi])

    def run(self, A, sa, out, side=None):
        n = len(self.pieces)
        if side is None:
            for c in range(n):
                self.unpack(c)
                self.mm(c, A, sa, out)
            return
        main = torch.cuda.current_stream()
        self.unpack(0)
        for c in range(n):
            if c + 1 < n:
                side.wait_stream(main)  # chunk c + 1's buffers are free (its previous reader is done)
                with torch.cuda.stream(side):
                    self.unpack(c + 1)
            self.mm(c, A, sa, out)
            main.wait_stream(side)


def row(proj, M):
    N, K, G = proj.N, proj.K, proj.K // 128
    wt = cases.w4_weight(proj, 4, seed=1)
    sets = [cases.rotate_quant(cases.activations(M, K, seed), wt, "e4m3", "group") for seed in (2, 3)]
    sas = [impl.blockwise.activation_scales(AS, M, G) for _, AS, _ in sets]
    outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
    side = torch.cuda.Stream()
    cfg = impl.PREFILL["blockwise"]
    ref = impl.gemm(*sets[0], wt.w, wt.bounds, False, "prefill", cfg=cfg)
    r = {"proj": proj.name, "M": M, "N": N, "K": K, "P": proj.P}
    one = torch.ones((), device="cuda")
    peer_a = [torch.randn(M, K, device="cuda").to(E4) for _ in sets]
    w8n = torch.randn(N, K, device="cuda").to(E4)
    whole = Chunked(wt.w, K, [(lo, hi, p) for p, (lo, hi) in enumerate(itertools.pairwise(wt.bounds))])

    def beside(s, sa, o):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            impl.unpack_w8(wt.w, False, zfold=True, blocks=wt.bounds)
        for c in range(len(whole.pieces)):
            whole.mm(c, s[0], sa, o)
        torch.cuda.current_stream().wait_stream(side)

    for c in range(len(whole.pieces)):
        whole.unpack(c)
    calls = {
        "served": [lambda s=s, o=o: impl.gemm(*s, wt.w, wt.bounds, False, "prefill", out=o, cfg=cfg)
                   for s, o in zip(sets, outs, strict=True)],
        "unpack": [lambda: impl.unpack_w8(wt.w, False, zfold=True, blocks=wt.bounds)],
        "mm": [lambda s=s, sa=sa, o=o: [whole.mm(c, s[0], sa, o) for c in range(len(whole.pieces))]
               for s, sa, o in zip(sets, sas, outs, strict=True)],
        "beside": [lambda s=s, sa=sa, o=o: beside(s, sa, o) for s, sa, o in zip(sets, sas, outs, strict=True)],
        "scaled_mm_tensor": [lambda a=a: torch._scaled_mm(a, w8n.t(), scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16) for a in peer_a],
    }
    for C in (2, 4):
        ch = Chunked(wt.w, K, chunks(wt.bounds, C))
        r[f"chunks{C}"] = len(ch.pieces)
        check = torch.empty_like(ref)
        ch.run(sets[0][0], sas[0], check, side)
        torch.cuda.synchronize()
        r[f"overlap{C}_max_diff_vs_served"] = ((check.float() - ref.float()).abs().max()
                                               / ref.float().abs().max()).item()
        calls[f"seq{C}"] = [lambda s=s, sa=sa, o=o, ch=ch: ch.run(s[0], sa, o)
                            for s, sa, o in zip(sets, sas, outs, strict=True)]
        calls[f"overlap{C}"] = [lambda s=s, sa=sa, o=o, ch=ch: ch.run(s[0], sa, o, side)
                                for s, sa, o in zip(sets, sas, outs, strict=True)]
    time_calls(r, calls, reps=10, min_calls=8)
    for name in calls:
        r[name + "_x_tensor"] = r["scaled_mm_tensor_us"] / r[name + "_us"]
    return r


def main(path):
    shapes = {p.name: p for p in projections(1)}
    write_rows(path, (row(shapes[name], M) for name, M in SHAPES))


if __name__ == "__main__":
    main(sys.argv[1])
