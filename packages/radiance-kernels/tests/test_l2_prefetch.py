"""L2 prefetch of the next GEMM's weights by its producer: the plan's geometry (the first groups of every split of
the decode config the GEMM runs, within the budget), the refusal where the instruction does not exist, and on an
sm_90 GPU producers issuing it byte-identical to the same launches without it, eager and in a CUDA graph."""

import pytest
import torch
from conftest import GPU
from test_w4a8_gemm import weights

from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.stream import triton as st
from radiance_kernels.ops.w4a8_gemm import prepare_codes
from radiance_kernels.ops.w4a8_gemm import triton as w4

SM90 = GPU and torch.version.cuda is not None and torch.cuda.get_device_capability() >= (9, 0)


def _covered(region, count) -> set[int]:
    """Byte offsets a plan region names (the kernel's lanes split each range; here the ranges themselves)."""
    _, stride, length, total = region
    return {b for j in range(count) for b in range(j * stride, min(j * stride + length, total))}


@pytest.mark.parametrize("bits,M,groups", [(4, 8, 1), (5, 8, 2), (4, 1, 100), (5, 16, 0)])
def test_plan_names_the_first_groups_of_every_split(device, bits, M, groups):
    K, N = 1280, 96
    w = prepare_codes(*weights(K, N, bits, seed=1, device=device), bits)
    int8 = bits == 5
    band, over = w4.picked("w4a8_gemm", M, N, K, "auto", device, None, int8, bits)
    cfg = w4.config(M, N, K, band, w4.triton_interpreted(), over, w4._decode_default(M))
    per, splits, G = cfg["per"], cfg["splits"], K // 128
    plan = w4.l2_prefetch_plan(w, M, int8, groups)
    if groups == 0:
        assert plan is None
        return
    regions, count = plan
    assert count == splits and len(regions) == (3 if bits == 5 else 2)
    ahead = min(per, groups)
    for region, (t, gb) in zip(regions, [(w.wq, 64 * N), (w.sz, 4 * N), (w.wh, 16 * N)], strict=False):
        assert region[0].data_ptr() == t.data_ptr() and region[3] == t.numel() * t.element_size()
        assert region[1] % 16 == 0 and region[2] % 16 == 0
        groups = {g for s in range(splits) for g in range(s * per, min(s * per + ahead, G))}
        assert _covered(region, count) == {g * gb + b for g in groups for b in range(gb)}


def test_prefill_has_no_plan(device):
    w = prepare_codes(*weights(256, 64, 4, seed=0, device=device), 4)
    assert w4.l2_prefetch_plan(w, 4096, False) is None


@pytest.mark.skipif(SM90, reason="the refusal is where the instruction does not exist")
def test_prefetch_refused_without_sm90(device):
    K = 256
    w = prepare_codes(*weights(K, 64, 4, seed=0, device=device), 4)
    rot = random_rotations(1, K, seed=0, device=device)
    x = torch.randn(2, K, device=device).to(torch.bfloat16)
    with pytest.raises(ValueError, match="sm_90"):
        st.launch("none", x, rotation=rot, elem="e4m3", granularity="group", prefetch=w4.l2_prefetch_plan(w, 2, False))


@pytest.mark.skipif(not SM90, reason="cp.async.bulk.prefetch: NVIDIA sm_90+")
@pytest.mark.parametrize("producer", ["none", "add_rms_gemma", "silu_mul", "gated_rms_norm"])
@pytest.mark.parametrize("bits,M,elem", [(4, 8, "e4m3"), (5, 1, "int8"), (4, 16, "int8"), (5, 8, "e4m3")])
def test_producer_prefetch_is_byte_identical(producer, bits, M, elem):
    K, N = 5120, 6144
    ws = [prepare_codes(*weights(K, N, bits, seed=i, device="cuda"), bits) for i in range(2)]
    rot = random_rotations(1, K, seed=3, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    x, y = (torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2))
    gw = torch.rand(K, device="cuda").to(torch.bfloat16) + 0.5

    def linear(w, plan):
        b, wt = (None, None) if producer == "none" else (y, gw[:128] if producer == "gated_rms_norm" else gw)
        if producer == "silu_mul":
            wt = None
        o = st.launch(producer, x, b, wt, 1e-6, rot, elem, "group", store_hs=producer.startswith("add"), hw=True,
                      prefetch=plan)
        return o, w4.gemm(o["A"], o["AS"], o["RS"], w, [0, N], False)

    for w in ws:
        plan = w4.l2_prefetch_plan(w, M, elem == "int8", 1000)
        assert plan is not None
        want_o, want = linear(w, None)
        got_o, got = linear(w, plan)
        assert want_o.keys() == got_o.keys() and all(torch.equal(got_o[k], want_o[k]) for k in want_o)
        assert torch.equal(got, want)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            o, out = linear(w, plan)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want) and all(torch.equal(o[k], want_o[k]) for k in want_o)
