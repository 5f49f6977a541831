"""Programmatic dependent launch (PDL): the switch, and on an sm_90 GPU a chain of producers and decode GEMMs — each
GEMM's output the next producer's input; the GEMM lets the next launch start after its loop, the producers are
launched as its dependents and wait for it — eager and replayed from a CUDA graph, == the same launches without PDL,
bytewise (a producer that read before its GEMM finished would see the previous input's values)."""

import pytest
import torch
from conftest import GPU
from test_w4a8_gemm import weights

from radiance_kernels import backends
from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.w4a8_gemm import prepare_codes

SM90 = GPU and torch.version.cuda is not None and torch.cuda.get_device_capability() >= (9, 0)


def test_switch_is_scoped(device):
    """On where it can run (NVIDIA sm_90+, not the interpreter), off inside ``programmatic_launch(False)``, restored
    after it even when the block raises."""
    assert not backends.programmatic_launch_on("cpu")
    assert backends.programmatic_launch_on(device) == SM90
    with pytest.raises(KeyError), backends.programmatic_launch(False):
        assert not backends.programmatic_launch_on(device)
        with backends.programmatic_launch(True):
            assert backends.programmatic_launch_on(device) == SM90
        assert not backends.programmatic_launch_on(device)
        raise KeyError
    assert backends.programmatic_launch_on(device) == SM90


def assert_same_as_plain(chain, xs):
    """``chain`` on each input gives the plain launches' bits with programmatic launch on, eager and replayed from a
    CUDA graph with the inputs alternating (a launch reading before its predecessor finished would see the other
    input's values)."""
    with backends.programmatic_launch(False):
        want = [chain(x) for x in xs]
    assert all(w.isfinite().all() and w.abs().max() > 0 for w in want) and not torch.equal(*want)
    for x, w in zip(xs, want, strict=True):
        assert torch.equal(chain(x), w)
    static = xs[0].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain(static)
    for _ in range(2):
        for x, w in zip(xs, want, strict=True):
            static.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, w)


@pytest.mark.skipif(not SM90, reason="programmatic dependent launch: NVIDIA sm_90+")
@pytest.mark.parametrize("cfg,elem,producer", [("mma2n64t2s", "e4m3", "bm1w1"), ("mma8n64t2s", "int8", "bm1w1"),
                                               ("mma8n64t2o12", "int8", "bm1w1"), ("gemv_o8", "int8", "bm1w1"),
                                               ("gemv_o8", "e4m3", "bm1w1"), ("mma2n64t2s", "e4m3", "bm1w1e"),
                                               ("mma8n64t2s", "int8", "bm1w1e"), ("mma2n64t2s", "e4m3", "bm1w1p"),
                                               ("mma8n64t2s", "int8", "bm1w1p")])
def test_programmatic_launch_waits_for_its_producer(cfg, elem, producer, monkeypatch):
    """A chain of producers and decode GEMMs, each launch a programmatic dependent of the one before (the GEMM of
    its producer, the producer of the GEMM), gives the plain launches' bits, eager and replayed in a CUDA graph —
    with the producers' constants read before their wait too (``bm1w1e`` / ``bm1w1p``)."""
    from radiance_kernels.ops.stream import triton as st
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    monkeypatch.setattr(st, "SMALL_M_DEFAULT", producer)

    M, K, layers = 8, 640, 6
    ops = torch.ops.radiance
    rots = [random_rotations(1, K, seed=i, device="cuda") for i in range(layers)]
    ws = [prepare_codes(*weights(K, K, 4, seed=i, device="cuda"), 4) for i in range(layers)]
    norm = torch.rand(K, device="cuda").to(torch.bfloat16) + 0.5

    def chain(x):
        h = res = x
        for i, (rot, w) in enumerate(zip(rots, ws, strict=True)):
            if i % 2:  # add+RMSNorm: two launches at this M (the split sum of squares)
                _, res, A, AS, RS = ops.add_rms_norm_rotate_quant(h, res, norm, 1e-6, False, *rot, elem, "group",
                                                                  "triton")
            else:
                A, AS, RS = ops.rotate_quant(h, *rot, elem, "group", "triton")
            h = impl.gemm(A, AS, RS, w, [0, K], False, "decode", cfg=impl.DECODE[cfg])
        return h

    g = torch.Generator(device="cuda").manual_seed(0)
    assert_same_as_plain(chain, [torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2)])


@pytest.mark.skipif(not SM90, reason="programmatic dependent launch: NVIDIA sm_90+")
@pytest.mark.parametrize("early", (False, True))
def test_skinny_gemm_waits_for_the_gemm_before_it(early, monkeypatch):
    """The skinny GEMM, a programmatic dependent, reading each decode GEMM's output as it lands (and the next
    producer launched behind it), its weights loaded after or (``early``) before its wait: its outputs are the plain
    launches' bits, eager and replayed in a CUDA graph."""
    from radiance_kernels.ops.skinny_gemm import triton as sk
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    monkeypatch.setattr(sk, "EARLY", early)

    M, K, layers = 8, 640, 4
    ops = torch.ops.radiance
    rots = [random_rotations(1, K, seed=i, device="cuda") for i in range(layers)]
    ws = [prepare_codes(*weights(K, K, 4, seed=i, device="cuda"), 4) for i in range(layers)]
    g = torch.Generator(device="cuda").manual_seed(1)
    ba = [(torch.randn(48, K, generator=g, device="cuda") * K**-0.5).to(torch.bfloat16) for _ in range(layers)]

    def chain(x):
        h, ys = x, []
        for rot, w, b in zip(rots, ws, ba, strict=True):
            h = impl.gemm(*ops.rotate_quant(h, *rot, "e4m3", "group", "triton"), w, [0, K], False, "decode")
            ys.append(ops.skinny_gemm(h, b, "triton"))
        return torch.cat(ys, 1)

    assert_same_as_plain(chain, [torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2)])


@pytest.mark.skipif(not SM90, reason="programmatic dependent launch: NVIDIA sm_90+")
@pytest.mark.parametrize("cfg", ("mma2n64t2s", "gemv_o8", None))
def test_skinny_gemm_overlaps_the_gemm_before_it(cfg):
    """in_proj_ba's place in a GDN layer: the add+RMSNorm producer, the decode GEMM on its quantized output, then the
    skinny GEMM on its bf16 output after the GEMM (``after``: the overlap form, loading and multiplying beside the
    GEMM, writing after it), and the next layer's producer reading the GEMM's output behind the skinny launch: the
    plain launches' bits, eager and replayed in a CUDA graph (a next launch that did not wait for the GEMM through the
    skinny one would read the GEMM's output early)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    M, K, layers = 8, 640, 4
    ops = torch.ops.radiance
    rots = [random_rotations(1, K, seed=i, device="cuda") for i in range(layers)]
    ws = [prepare_codes(*weights(K, K, 4, seed=i, device="cuda"), 4) for i in range(layers)]
    norm = torch.rand(K, device="cuda").to(torch.bfloat16) + 0.5
    g = torch.Generator(device="cuda").manual_seed(2)
    ba = [(torch.randn(48, K, generator=g, device="cuda") * K**-0.5).to(torch.bfloat16) for _ in range(layers)]

    def chain(x):
        h, res, ys = x, x, []
        for rot, w, b in zip(rots, ws, ba, strict=True):
            hs, res, A, AS, RS = ops.add_rms_norm_rotate_quant(h, res, norm, 1e-6, False, *rot, "e4m3", "group",
                                                               "triton")
            h = impl.gemm(A, AS, RS, w, [0, K], False, "decode", cfg=cfg and impl.DECODE[cfg])
            ys.append(ops.skinny_gemm(hs, b, "triton", h))
        return torch.cat([h, *ys], 1)

    assert_same_as_plain(chain, [torch.randn(M, K, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2)])
