"""H200 probe (session 4, call 19): can cuBLASLt's 1x128 x 1x128 block-scaled fp8 GEMM (``torch._scaled_mm``
with [M, K/128] / [N, K/128] fp32 scales, CUDA >= 12.9, sm_90) carry the W4A8 prefill band?

Per shape: its error against an fp64 emulation (random codes, random per-block scales), and side by side in one
run: ``_scaled_mm`` per-tensor (the bar's peer), the block-scaled call, our per-call weight unpack
(:func:`unpack_w8`), and our Triton prefill GEMM (``deq``, which includes that unpack). Also whether ``out=`` may
be a column slice of a wider output (a partitioned projection writes each partition's columns in place).
``python tools/device/probe_blockwise.py OUT.json`` (GPU, PYTHONPATH as h200_run.sh sets it)."""

import json
import sys

import torch

from radiance_bench.kernelbench import cases
from radiance_bench.kernelbench.timing import graph_time
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.shapes import projections

E4 = torch.float8_e4m3fn


def blockwise(a, w8, sa, sb, out=None):
    """a [M, K] e4m3, w8 [N, K] e4m3, sa [M, G] fp32 M-contiguous, sb [G, N] fp32 contiguous."""
    return torch._scaled_mm(a, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=out)


def scales(rows, G, dev):
    return (torch.rand(rows, G, device=dev) * 2e-2 + 1e-3).t().contiguous().t()


def check(M, N, K, dev):
    G = K // 128
    a = torch.randn(M, K, device=dev).mul(40).to(E4)
    w8 = torch.randint(-15, 16, (N, K), device=dev).to(E4)
    sa, sb = scales(M, G, dev), scales(N, G, dev).t()
    ref = torch.einsum("mgk,ngk,mg,gn->mn", a.double().view(M, G, 128), w8.double().view(N, G, 128), sa.double(),
                       sb.double())
    got = blockwise(a, w8, sa, sb).double()
    res = {"M": M, "N": N, "K": K, "max_rel_to_absmax": ((got - ref).abs().max() / ref.abs().max()).item()}
    wide = torch.zeros(M, 2 * N, device=dev, dtype=torch.bfloat16)
    try:
        blockwise(a, w8, sa, sb, out=wide[:, N:])
        res["out_column_slice"] = bool(torch.equal(wide[:, N:].double(), got))
    except Exception as e:  # noqa: BLE001 - the probe records what the API says
        res["out_column_slice"] = f"error: {str(e)[:200]}"
    return res


def time_shape(p, M, dev):
    N, K, G = p.N, p.K, p.K // 128
    wt = cases.w4_weight(p, 4, seed=1)
    a = [torch.randn(M, K, device=dev).mul(40).to(E4) for _ in range(2)]
    w8 = w4.unpack_w8(wt.w, False).view(E4)
    sa, sb = scales(M, G, dev), scales(N, G, dev).t()
    one = torch.ones((), device=dev)
    A, AS, RS = cases.rotate_quant(cases.activations(M, K, 2), wt)
    row = {"proj": p.name, "M": M, "N": N, "K": K}
    calls = {
        "scaled_mm_tensor": [lambda x=x: torch._scaled_mm(x, w8.t(), scale_a=one, scale_b=one,
                                                           out_dtype=torch.bfloat16) for x in a],
        "scaled_mm_block": [lambda x=x: blockwise(x, w8, sa, sb) for x in a],
        "unpack_w8": [lambda: w4.unpack_w8(wt.w, False)],
        "triton_deq": [lambda: cases.w4a8_gemm(wt, A, AS, RS)],
    }
    for k, c in calls.items():
        try:
            t = graph_time(c, reps=10, min_calls=8)
            row[k + "_us"] = t.best_us
            row[k + "_TFLOPs"] = 2 * M * N * K / t.best_us / 1e6
        except Exception as e:  # noqa: BLE001
            row[k + "_error"] = str(e)[:300]
    if "scaled_mm_block_us" in row:
        row["block_plus_unpack_vs_tensor"] = row["scaled_mm_tensor_us"] / (row["scaled_mm_block_us"]
                                                                            + row["unpack_w8_us"])
    return row


def main(path):
    dev = "cuda"
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "checks": [], "timings": []}
    for M, N, K in [(256, 1024, 1024), (2048, 5120, 6144)]:
        try:
            out["checks"].append(check(M, N, K, dev))
        except Exception as e:  # noqa: BLE001
            out["checks"].append({"M": M, "N": N, "K": K, "error": str(e)[:300]})
    print(json.dumps(out["checks"]), flush=True)
    shapes = {p.name: p for p in projections(1)}
    for name, M in [("attn.qkv", 2048), ("mlp.gate_up", 2048), ("mlp.down", 2048), ("mlp.gate_up", 8192)]:
        row = time_shape(shapes[name], M, dev)
        print(json.dumps(row), flush=True)
        out["timings"].append(row)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
