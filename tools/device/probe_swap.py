"""Probe (GPU): where a decode config's operands land. One-hot int8 activations (token m: the value m + 1 at k_m),
random codes, no fold (ablation "nofold": ``out = sum_k a c`` exactly), one tile: each output row must equal
``(m + 1) * c[k_m]``; a wrong row is listed with the code rows it matches up to a column permutation. H200 call 65
found swap-AB's transposed reads wrong this way (right tokens, right word 0, the other words from the wrong place).

    PYTHONPATH=packages/radiance-kernels/src OUT=dir python3 tools/device/probe_swap.py mma2n64t2s mma8n64t2s ...
"""

import json
import os
import sys

import torch

from radiance_kernels.ops.w4a8_gemm import prepare_codes
from radiance_kernels.ops.w4a8_gemm import triton as impl

M, K, N = 8, 256, 64
KS = [0, 1, 2, 7, 8, 9, 64, 200]  # word 0, word 1, the second half-group, the second group


def probe(name: str, q: torch.Tensor) -> dict:
    w = prepare_codes(q, torch.full((K // 128, N), 8, dtype=torch.uint8, device="cuda"),
                      torch.ones(K // 128, N, dtype=torch.float16, device="cuda"), 4)
    A = torch.zeros(1, M, K, dtype=torch.int8, device="cuda")
    for m, k in enumerate(KS):
        A[0, m, k] = m + 1
    RS = A.float().reshape(1, M, K // 128, 128).sum(-1)
    out = torch.full((M, N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, torch.ones(1, M, device="cuda"), RS, w, [0, N], False, "decode", out=out,
              cfg={**impl.DECODE[name], "splits": 1, "ablate": "nofold"})
    C = (q.int() - (0 if impl.DECODE[name]["k8"] else 8)).float()  # the codes the kernel multiplies
    o = out.float()
    rows = []
    for m, k in enumerate(KS):
        if not torch.equal(o[m], (m + 1) * C[k]):
            same = [kk for kk in range(K) if torch.equal(o[m].sort().values, ((m + 1) * C[kk]).sort().values)]
            rows.append(dict(m=m, k=k, got=o[m, :8].tolist(), want=((m + 1) * C[k])[:8].tolist(), permuted_of=same))
    return dict(ok=not rows, wrong_rows=rows)


if __name__ == "__main__":
    torch.manual_seed(0)
    codes = torch.randint(0, 16, (K, N), dtype=torch.uint8, device="cuda")
    res = {name: probe(name, codes) for name in sys.argv[1:]}
    for name, r in res.items():
        print(name, "ok" if r["ok"] else f"WRONG rows {[x['m'] for x in r['wrong_rows']]}")
    with open(os.path.join(os.environ.get("OUT", "."), "probe_swap.json"), "w") as f:
        json.dump(res, f, indent=1)
