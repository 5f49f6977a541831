"""Probe (H200): where swap-AB's operands land. One-hot int8 activations (token m: value m + 1 at k_m), random
codes, no fold (ablation "nofold": out = sum_k a c exactly), one tile: each output row names the code row it read."""
import os, sys, json
import torch
from radiance_kernels.ops.w4a8_gemm import triton as impl, prepare_codes

torch.manual_seed(0)
M, K, N = 8, 256, 64
q = torch.randint(0, 16, (K, N), dtype=torch.uint8, device="cuda")
z = torch.full((K // 128, N), 8, dtype=torch.uint8, device="cuda")
s = torch.ones(K // 128, N, dtype=torch.float16, device="cuda")
w = prepare_codes(q, z, s, 4)
ks = [0, 1, 2, 7, 8, 9, 64, 200]
A = torch.zeros(1, M, K, dtype=torch.int8, device="cuda")
for m, k in enumerate(ks):
    A[0, m, k] = m + 1
AS = torch.ones(1, M, device="cuda")
RS = A.float().reshape(1, M, K // 128, 128).sum(-1)
res = {}
for name in ("mma2n64t2", "mma2n64t2s", "mma8n64t2", "mma8n64t2s"):
    k8 = impl.DECODE[name].get("k8", False)
    C = (q.int() - (0 if k8 else 8)).float()
    out = torch.full((M, N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, AS, RS, w, [0, N], False, "decode", out=out, cfg={**impl.DECODE[name], "splits": 1, "ablate": "nofold"})
    o = out.float()
    want = torch.stack([(m + 1) * C[k] for m, k in enumerate(ks)])
    rows = []
    for m in range(M):
        hit = [(kk, v) for kk in range(K) for v in range(1, 9) if torch.equal(o[m], v * C[kk])]
        perm = [(kk, v) for kk in range(K) for v in range(1, 9)
                if torch.equal(o[m].sort().values, (v * C[kk]).sort().values)]
        rows.append(dict(m=m, want_k=ks[m], exact=hit[:4], perm=perm[:4], head=o[m, :8].tolist(),
                         want_head=want[m, :8].tolist()))
    res[name] = dict(ok=torch.equal(o, want), rows=rows)
    torch.save(dict(o=o.cpu(), q=q.cpu(), A=A.cpu()), os.path.join(os.environ["OUT"], f"probe-{name}.pt"))
    print(name, "ok" if res[name]["ok"] else "WRONG")
    for r in rows:
        print("  ", r)
json.dump(res, open(os.path.join(os.environ["OUT"], "probe_swap.json"), "w"), indent=1)
