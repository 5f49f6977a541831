import pytest
import torch
from conftest import FULL_SHAPES, compiled_for_sm90

import radiance_kernels.ops  # noqa: F401  (registers the ops)

SHAPES = [(m, n, k) for n in (48, 96) for m in (1, 8, 16, 64) for k in (5120,)] if FULL_SHAPES else [
    (1, 48, 1024), (5, 48, 768), (16, 96, 512), (3, 40, 300)]


def _inputs(m, n, k, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16)
    return x.to(device), w.to(device)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_triton_at_bf16_floor(m, n, k, device):
    x, w = _inputs(m, n, k, device)
    exact = x.double() @ w.double().t()
    y = torch.ops.radiance.skinny_gemm(x, w, "triton")
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    # one bf16 rounding of an fp32 sum: within half a bf16 ulp (≤ 2^-8 relative) plus fp32 reassociation
    err = (y.double() - exact).abs()
    assert (err <= exact.abs() * 2.0**-8 * 1.01 + 1e-5 * exact.abs().max()).all(), err.max().item()
    ref = torch.ops.radiance.skinny_gemm(x, w, "reference")
    assert (y != ref).float().mean().item() < 0.02


def test_deterministic(device):
    """The same bits call after call, and with ``after`` (the overlap form; any tensor of the device) too."""
    x, w = _inputs(8, 48, 1280, device, seed=1)
    ys = [torch.ops.radiance.skinny_gemm(x, w, "triton") for _ in range(3)]
    ys += [torch.ops.radiance.skinny_gemm(x, w, "triton", torch.zeros(2, device=device))]
    assert all(torch.equal(ys[0], y) for y in ys[1:])


def test_bad_inputs():
    x, w = _inputs(4, 48, 256, "cpu")
    with pytest.raises(TypeError, match="bfloat16"):
        torch.ops.radiance.skinny_gemm(x.float(), w, "reference")
    with pytest.raises(ValueError, match=r"w \[N, K\]"):
        torch.ops.radiance.skinny_gemm(x, w[:, :128], "reference")
    with pytest.raises(ValueError, match="at most 64"):
        torch.ops.radiance.skinny_gemm(torch.zeros(65, 256, dtype=torch.bfloat16), w, "reference")
    with pytest.raises(ValueError, match="after is on meta"):
        torch.ops.radiance.skinny_gemm(x, w, "reference", torch.empty(1, device="meta"))


@pytest.mark.parametrize("bn,kslice,num_warps,early", [(16, 256, 4, False), (32, 512, 4, False),
                                                       (16, 1024, 8, False), (16, 256, 4, True)])
def test_tiles_leave_the_counters_zero(bn, kslice, num_warps, early, device):
    """Every tile config — its weights loaded before the programmatic wait too (``early``) — stays at the bf16 floor
    and leaves its arrival counters zeroed (no memset per call): a second call on the same buffer gives the same
    bits, the late and early loads the same, and so does the ``overlap`` form (loads and product before its wait)."""
    from radiance_kernels.ops.arrivals import counters
    from radiance_kernels.ops.skinny_gemm import triton as impl

    x, w = _inputs(5, 96, 1280, device, seed=2)
    exact = x.double() @ w.double().t()
    ys = [impl.skinny_gemm(x, w, bn, kslice, num_warps, early) for _ in range(2)]
    assert torch.equal(ys[0], ys[1]) and not counters(device, 1, "skinny_gemm").any()
    assert torch.equal(ys[0], impl.skinny_gemm(x, w, bn, kslice, num_warps, not early))
    assert torch.equal(ys[0], impl.skinny_gemm(x, w, bn, kslice, num_warps, early, overlap=True))
    err = (ys[0].double() - exact).abs()
    assert (err <= exact.abs() * 2.0**-8 * 1.01 + 1e-5 * exact.abs().max()).all(), err.max().item()


OVERLAP_SM90 = """
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from radiance_kernels.ops.skinny_gemm.triton import _skinny_kernel as k
out = []
for early, overlap in ((False, False), (True, False), (False, True)):
    ce = dict(BM=16, BN=16, KSLICE=256, INTERP=False, WAIT=True, EARLY=early, OVERLAP=overlap)
    sig = {n: "constexpr" if n in ce else "*bf16" if n in ("x_ptr", "w_ptr", "y_ptr") else
           "*fp32" if n == "part_ptr" else "*i32" if n == "count_ptr" else "i32" for n in k.arg_names}
    ptx = triton.compile(ASTSource(fn=k, signature=sig, constexprs=ce), target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 4}).asm["ptx"]
    head, wait, tail = ptx.partition("griddepcontrol.wait")
    out.append(dict(early=early, overlap=overlap, wait=bool(wait), trigger="launch_dependents" in head,
        ld_before=head.count("ld.global"), ld_after=tail.count("ld.global"), ld_cg=ptx.count("ld.global.cg"),
        mma_before=head.count("mma.sync"), st_before=head.count("st.global") + head.count("atom."),
        st_after=tail.count("st.global") + tail.count("atom.")))
print(json.dumps(out))
"""


def test_overlap_writes_only_after_its_wait_sm90():
    """sm_90 code of the programmatic-dependent skinny GEMM (each lets the next launch start before its wait): the
    plain form waits before loading ``x``, the ``early`` form loads only its weights before the wait, the ``overlap``
    form loads both (``x`` past the L1) and multiplies before it — and no form writes anything (partials, arrival
    count, output) before its wait."""
    late, early, overlap = compiled_for_sm90(OVERLAP_SM90)
    assert all(r["wait"] and r["trigger"] and r["st_before"] == 0 and r["st_after"] > 0
               for r in (late, early, overlap)), (late, early, overlap)
    assert late["ld_before"] == 0 and late["mma_before"] == 0 and 0 < early["ld_before"] < overlap["ld_before"]
    assert overlap["mma_before"] > 0 == early["mma_before"] and overlap["ld_cg"] > 0 == late["ld_cg"], overlap
    assert late["ld_after"] == early["ld_before"] + early["ld_after"] == overlap["ld_before"] + overlap["ld_after"]
