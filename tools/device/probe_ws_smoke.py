"""H200 smoke of the warp-specialised wgmma prefill form, one case per process (a CUDA fault poisons its
process): ``python tools/device/probe_ws_smoke.py NAME ELEM GROUPED P M N K`` prints the relative error against the
reference, or the fault. Run under ``compute-sanitizer`` to locate a fault."""

import sys

import torch

from radiance_kernels.formats import e4m3
from radiance_kernels.ops.w4a8_gemm import prepare_codes
from radiance_kernels.ops.w4a8_gemm import triton as impl
from radiance_kernels.ops.w4a8_gemm.reference import gemm as reference

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def main(name, elem, grouped, P, M, N, K):
    g = torch.Generator(device=DEV).manual_seed(0)
    G = K // 128
    x = torch.randn(P, M, K, generator=g, device=DEV)
    amax = x.reshape(P, M, G, 128).abs().amax(-1) if grouped else x.abs().amax(-1)
    AS = (amax / (448.0 if elem == "e4m3" else 127.0)).clamp(min=1e-12).float()
    y = (x.reshape(P, M, G, 128) / (AS[..., None] if grouped else AS[..., None, None])).reshape(P, M, K)
    A = e4m3.encode(y) if elem == "e4m3" else y.round().clamp(-127, 127).to(torch.int8)
    dec = e4m3.decode(A) if elem == "e4m3" else A.float()
    RS = dec.double().reshape(P, M, G, 128).sum(-1).float()
    codes = torch.randint(0, 16, (K, N), generator=g, device=DEV, dtype=torch.uint8)
    zeros = torch.randint(0, 16, (G, N), generator=g, device=DEV, dtype=torch.uint8)
    scales = (torch.rand(G, N, generator=g, device=DEV) * 0.02 + 1e-3).half()
    w = prepare_codes(codes, zeros, scales, 4)
    bounds = [round(N * i / P) // 128 * 128 for i in range(P)] + [N]
    out = torch.zeros(M, N, dtype=torch.bfloat16, device=DEV)
    impl.gemm(A, AS, RS, w, bounds, False, "prefill", out=out, cfg=impl.PREFILL[name])
    torch.cuda.synchronize() if DEV == "cuda" else None
    ref = reference(A, AS, RS, w, bounds).float()
    print(name, elem, grouped, P, M, N, K, "rel", ((out.float() - ref).norm() / ref.norm()).item(), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2] == "1", *map(int, a[3:]))
