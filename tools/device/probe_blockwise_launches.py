"""H200 probe (session 25): what the ``blockwise`` prefill call spends beside the library's block-scaled GEMM.

Per shape (27B-class, TP=1) and activation scale kind (e4m3 per-group / per-token), side by side in one run, µs in a
CUDA graph: the served call (``w4a8_gemm`` with the ``blockwise`` config: one unpack launch writing ``w8`` and the
weight scales per partition, one copy of the activation scales, a ``_scaled_mm`` per partition), the same call as it
stood before (the unpack, then the fp16 scales decoded and widened by torch, a contiguous copy of each partition's
slice and two launches per partition for the activation scales — ``served_before``), its parts alone (the unpack;
the ``_scaled_mm`` calls on ready operands) and the bar's peer (per-tensor ``_scaled_mm`` fp8 on the same M, N, K).

    python tools/device/probe_blockwise_launches.py OUT.json

(GPU, PYTHONPATH as h200_run.sh sets it)."""

import sys

import torch
from probe_rows import time_calls, write_rows

from radiance_bench.kernelbench import cases
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm.reference import group_scales
from radiance_kernels.shapes import projections

E4 = torch.float8_e4m3fn
SHAPES = [("attn.qkv", 2048), ("attn.o_proj", 2048), ("mlp.gate_up", 2048), ("mlp.down", 2048),
          ("mlp.gate_up", 8192)]


def served_before(A, AS, wt, out):
    """The blockwise call as committed before session 25 (8ebfb07), step by step."""
    P, M, K = A.shape
    G, w, bounds = K // 128, wt.w, wt.bounds
    w8 = impl.unpack_w8(w, False, zfold=True).view(E4)
    s = group_scales(w.sz).float()
    for p in range(P):
        lo, hi = bounds[p], bounds[p + 1]
        sp = AS[p] if AS.dim() == 3 else AS[p][:, None].expand(-1, G)
        sa = torch.zeros(G, M, dtype=torch.float32, device=A.device)
        sa[:, :M] = sp.t()
        torch._scaled_mm(A[p].view(E4), w8[lo:hi].t(), scale_a=sa.t(), scale_b=s[:, lo:hi].contiguous(),
                         out_dtype=torch.bfloat16, out=out[:M, lo:hi])
    return out


def row(proj, M, gran):
    N, K = proj.N, proj.K
    wt = cases.w4_weight(proj, 4, seed=1)
    sets = [cases.rotate_quant(cases.activations(M, K, seed), wt, "e4m3", gran) for seed in (2, 3)]
    outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in sets]
    cfg = impl.PREFILL["blockwise"]
    w8, sb = impl.unpack_w8(wt.w, False, zfold=True, blocks=wt.bounds)
    w8 = w8.view(E4)
    G = K // 128
    sas = [impl.blockwise.activation_scales(AS, M, G) for _, AS, _ in sets]
    one = torch.ones((), device="cuda")
    peer_a = [torch.randn(M, K, device="cuda").to(E4) for _ in sets]
    w8n = torch.randn(N, K, device="cuda").to(E4)

    def mm_only(A, sa, o):
        for p in range(A.shape[0]):
            lo, hi = wt.bounds[p], wt.bounds[p + 1]
            torch._scaled_mm(A[p].view(E4), w8[lo:hi].t(), scale_a=sa[p].t(),
                             scale_b=sb[G * lo:G * hi].view(G, hi - lo), out_dtype=torch.bfloat16, out=o[:, lo:hi])

    calls = {
        "served": [lambda s=s, o=o: impl.gemm(*s, wt.w, wt.bounds, False, "prefill", out=o, cfg=cfg)
                   for s, o in zip(sets, outs, strict=True)],
        "served_before": [lambda s=s, o=o: served_before(s[0], s[1], wt, o)
                          for s, o in zip(sets, outs, strict=True)],
        "unpack": [lambda: impl.unpack_w8(wt.w, False, zfold=True, blocks=wt.bounds)],
        "scaled_mm_blocks": [lambda s=s, sa=sa, o=o: mm_only(s[0], sa, o)
                             for s, sa, o in zip(sets, sas, outs, strict=True)],
        "scaled_mm_tensor": [lambda a=a: torch._scaled_mm(a, w8n.t(), scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16) for a in peer_a],
    }
    r = {"proj": proj.name, "M": M, "N": N, "K": K, "P": proj.P, "gran": gran}
    ref = served_before(*sets[0][:2], wt, torch.empty_like(outs[0]))
    impl.gemm(*sets[0], wt.w, wt.bounds, False, "prefill", out=outs[0], cfg=cfg)
    r["served_equals_before"] = bool(torch.equal(ref, outs[0]))
    time_calls(r, calls, reps=10, min_calls=8)
    for name in ("served", "served_before"):
        r[name + "_x_tensor"] = r["scaled_mm_tensor_us"] / r[name + "_us"]
    return r


def main(path):
    shapes = {p.name: p for p in projections(1)}
    write_rows(path, (row(shapes[name], M, gran) for name, M in SHAPES for gran in ("group", "token")))


if __name__ == "__main__":
    main(sys.argv[1])
