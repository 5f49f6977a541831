"""radiance::w4a8_gemm: layout, reference vs an independent fp64 dequant-matmul, Triton vs reference.

Activations are built here from formats.e4m3 (per-token / per-group scales, RS = group sums of the
decoded codes), standing in for rotate_quant's output.
"""

import importlib
import itertools
import struct

import pytest
import torch
from conftest import FULL_SHAPES, GPU, REL, compiled_for_sm90, gemm_error

from radiance_kernels import shapes
from radiance_kernels.formats import awq, e4m3
from radiance_kernels.ops.arrivals import counters
from radiance_kernels.ops.w4a8_gemm import prepare, prepare_codes, unprepare

GPU_CUDA = GPU and torch.version.cuda is not None
SM90 = GPU_CUDA and torch.cuda.get_device_capability() == (9, 0)


def acts(P, M, K, elem, grouped, kind="normal", seed=0, device="cpu"):
    """(A, AS, RS) as rotate_quant produces them; kind="subnormal": most e4m3 codes subnormal."""
    g = torch.Generator(device=device).manual_seed(seed)
    G = K // 128
    x = torch.randn(P, M, K, generator=g, device=device) * torch.exp(torch.randn(P, M, 1, generator=g, device=device))
    if kind == "subnormal":  # one big outlier per group pushes the bulk below 2^-6 of the scale
        x[..., ::128] = 3e4
    xg = x.reshape(P, M, G, 128)
    amax = xg.abs().amax(-1) if grouped else x.abs().amax(-1)
    qmax = 448.0 if elem == "e4m3" else 127.0
    AS = (amax / qmax).clamp(min=1e-12).float()
    sc = AS[..., None] if grouped else AS[..., None, None]
    y = (xg / sc).reshape(P, M, K)
    if elem == "e4m3":
        A = e4m3.encode(y)
        dec = e4m3.decode(A)
    else:
        A = y.round().clamp(-127, 127).to(torch.int8)
        dec = A.float()
    RS = dec.double().reshape(P, M, G, 128).sum(-1).float()
    return A, AS, RS, dec


def weights(K, N, bits, zkind="random", seed=1, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    hi = 2**bits - 1
    codes = torch.randint(0, hi + 1, (K, N), generator=g, device=device)
    if zkind == "random":
        zeros = torch.randint(0, hi + 1, (K // 128, N), generator=g, device=device)
    else:  # zero-point extremes: z = 0 and z = max in alternating columns, codes at the ends
        zeros = torch.zeros(K // 128, N, dtype=torch.int64, device=device)
        zeros[:, 1::2] = hi
        codes = torch.where(torch.rand(K, N, generator=g, device=device) < 0.5, 0, hi)
    scales = (torch.rand(K // 128, N, generator=g, device=device) * 0.02 + 1e-3).half()
    return codes.to(torch.uint8), zeros.to(torch.uint8), scales


def assert_rounds_exact(out, exact):
    """bf16 ``out`` is ``exact`` (fp64) rounded, up to rare one-ulp flips from summation order."""
    r, _ = gemm_error(out.cpu(), exact.to(torch.bfloat16))
    assert r <= 3e-4, r
    assert gemm_error(out.cpu(), exact)[0] <= 1.3 * REL


def dequant_matmul(dec, AS, codes, zeros, scales, bounds):
    """Independent fp64: W = (q - z) s, X = a * as, out = X @ W per partition."""
    P, M, K = dec.shape
    W = awq.dequantize(codes.cpu(), zeros.cpu(), scales.cpu()).double()
    out = torch.empty(M, W.shape[1], dtype=torch.float64)
    for p in range(P):
        s = AS[p].cpu().double()
        s = s.repeat_interleave(128, -1) if s.dim() == 2 else s[:, None]
        X = dec[p].cpu().double() * s
        out[:, bounds[p]:bounds[p + 1]] = X @ W[:, bounds[p]:bounds[p + 1]]
    return out


def call(A, AS, RS, w, bounds, zpe, band, backend, out=None):
    if out is None:
        return torch.ops.radiance.w4a8_gemm(A, AS, RS, w.wq, w.wh, w.sz, bounds, w.bits, zpe, band, backend)
    torch.ops.radiance.w4a8_gemm_out(out, A, AS, RS, w.wq, w.wh, w.sz, bounds, w.bits, zpe, band, backend)
    return out


@pytest.mark.parametrize("bits", [4, 5])
def test_prepare_layout_and_round_trip(bits):
    codes, zeros, scales = weights(256, 64, bits)
    ck = awq.to_checkpoint(codes, zeros, scales, bits)
    w = prepare(ck["qweight"], ck["qzeros"], ck["scales"], ck.get("qweight_hi"), ck.get("qzeros_hi"))
    assert w.bits == bits and w.wq.shape == (32, 64) and w.sz.shape == (2, 64)
    assert w.wh.shape == ((32, 64) if bits == 5 else (0, 64)) and w.wh.dtype == torch.uint8
    q, z, s = unprepare(w)
    assert torch.equal(q, codes.long()) and torch.equal(z, zeros.long()) and torch.equal(s, scales)
    word = w.wq[3, 5].item() & 0xFFFFFFFF  # nibble j of wq[i, n] = low 4 bits of q[8i + j, n]
    assert [(word >> (4 * j)) & 15 for j in range(8)] == (codes[24:32, 5].long() & 15).tolist()
    if bits == 5:  # bit j of wh[i, n] = bit 4 of q[8i + j, n]: the fifth bits of wq[i, n]'s nibbles
        assert [(w.wh[3, 5].item() >> j) & 1 for j in range(8)] == (codes[24:32, 5].long() >> 4).tolist()
    sz = w.sz[1, 7].item()
    assert (sz >> 16) == zeros[1, 7].item() - 2 ** (bits - 1)
    s16 = torch.tensor([sz & 0xFFFF], dtype=torch.int32).to(torch.int16).view(torch.float16)
    assert s16.item() == scales[1, 7].item()


@pytest.mark.parametrize("elem,grouped,bits", list(itertools.product(["e4m3", "int8"], [False, True], [4, 5])))
def test_reference_vs_dequant_matmul(elem, grouped, bits):
    P, M, K, N, bounds = 3, 7, 384, 96, [0, 32, 64, 96]
    A, AS, RS, dec = acts(P, M, K, elem, grouped)
    codes, zeros, scales = weights(K, N, bits)
    out = call(A, AS, RS, prepare_codes(codes, zeros, scales, bits), bounds, False, "auto", "reference")
    assert_rounds_exact(out, dequant_matmul(dec, AS, codes, zeros, scales, bounds))


VARIANTS = list(itertools.product([4, 5], ["e4m3", "int8"], [False, True], [False, True], ["decode", "prefill"]))


@pytest.mark.parametrize("bits,elem,grouped,zpe,band", VARIANTS)
def test_triton_matches_reference(bits, elem, grouped, zpe, band, device):
    P, M, K, N, bounds = 2, 19, 256, 256, [0, 128, 256]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=bits, device=device)
    w = prepare_codes(*weights(K, N, bits, device=device), bits)
    ref = call(A, AS, RS, w, bounds, zpe, band, "reference")
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
    call(A, AS, RS, w, bounds, zpe, band, "triton", out=out)
    r, mx = gemm_error(out, ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)


SWAP_VARIANTS = [(4, "e4m3", True, False), (5, "e4m3", False, True), (4, "int8", True, True)]


@pytest.mark.parametrize("name,bits,elem,grouped,zpe",
                         [(n, 5, "e4m3", False, False) for n in ("split", "nib8")]
                         + [(n, 4, "e4m3", True, False) for n in ("fused", "nib8w", "nib8x", "nib8xp", "nib8xpr",
                                                                 "nib8p")]
                         + [("swap", *v) for v in SWAP_VARIANTS]
                         + [("nib8xpr", 4, "int8", True, True), ("nib8p", 5, "int8", False, False),
                            ("nib8", 5, "int8", True, False)])
def test_decode_configs(name, bits, elem, grouped, zpe, device):
    """Every named decode tile config (the bench's A/B) at 3 splits: kernel == reference ("swap" also
    int5 / per-token / ZPE; the nib8 loops also with int8 activations)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, M, K, N, bounds = 2, 5, 384, 512, [0, 256, 512]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=7, device=device)
    w = prepare_codes(*weights(K, N, bits, device=device), bits)
    ref = call(A, AS, RS, w, bounds, zpe, "decode", "reference")
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
    impl.gemm(A, AS, RS, w, bounds, zpe, "decode", out=out, cfg={**impl.DECODE[name], "splits": 3})
    r, mx = gemm_error(out, ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)


@pytest.mark.parametrize("elem", ["int8", "e4m3"])
@pytest.mark.parametrize("name,bits,grouped,M,N", [("gemv", 4, False, 1, 512), ("gemv", 5, True, 16, 384),
                                                     ("gemv256", 4, True, 5, 400), ("gemv1k", 5, False, 3, 512),
                                                     ("gemv_o16", 4, True, 2, 512), ("gemv128_o16", 5, True, 1, 400),
                                                     ("gemv256_o16r", 4, True, 1, 400), ("gemv_o8r", 5, False, 2, 512)])
def test_gemv_configs(name, bits, grouped, M, N, elem, device):
    """The CUDA-core decode kernel at 3 splits, P = 2, ragged N (masked loads and stores) == reference:
    int8 exact integer dot products, e4m3 exact products of biased codes (fp32 sums), so only the fp32
    summation order differs."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, K, bounds = 2, 384, [0, 128, N]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device=device)
    w = prepare_codes(*weights(K, N, bits, device=device), bits)
    ref = call(A, AS, RS, w, bounds, False, "decode", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device=device)
    name, _, pf = name.partition(":pf")  # the kept configs, and mma8p's prefetch depths 0 and 2
    impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out,
              cfg={**impl.DECODE[name], "splits": 3, **({"pf": int(pf)} if pf else {})})
    r, mx = gemm_error(out[:M], ref)  # 3 splits: one partial-sum step at rw >= 4, a masked tail at rw = 2
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)


@pytest.mark.parametrize("name", ["gemv", "nib8p"])
def test_split_reduction_width_is_bit_exact(name, device):
    """The kernel-side split reduction adds the partials in split order whatever its width (partials per step):
    rw = 1, 2, 4, 16 over 5 splits give identical bits (steps with masked tails included); a bad width raises.
    The four launches share one arrival-counter buffer, which each leaves zeroed (no per-launch memset)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    A, AS, RS, _ = acts(1, 2, 640, "e4m3", True, seed=4, device=device)
    w = prepare_codes(*weights(640, 256, 4, device=device), 4)
    outs = [impl.gemm(A, AS, RS, w, [0, 256], False, "decode", cfg={**impl.DECODE[name], "splits": 5, "rw": rw})
            for rw in (1, 2, 4, 16)]
    assert all(torch.equal(o, outs[0]) for o in outs[1:])
    assert gemm_error(outs[0], call(A, AS, RS, w, [0, 256], False, "decode", "reference"))[0] <= REL
    assert not counters(device, 1, "w4a8_gemm").any()
    with pytest.raises(ValueError, match="rw"):
        impl.config(2, 256, 640, "decode", True, {"rw": 3})


def split_sum(parts: torch.Tensor) -> torch.Tensor:
    """The consumers' reading of split partials (:func:`radiance_kernels.ops.stream.reference.activation`)."""
    from radiance_kernels.ops.stream.reference import activation

    return activation(parts)


@pytest.mark.parametrize("name,splits", [("nib8p", 5), ("gemv", 3), ("nib8xpr", 1)])
def test_split_partials_out_bit_exact(name, splits, device):
    """``defer``: the fp32 split partials [S, M, N] as stored, whose in-order sum rounded to bf16 is the
    kernel-reduced output bit for bit (one split: the partial is the unrounded tile); ``reduced``: that in-kernel sum
    as the one fp32 partial, the same bits for the consumer; the op returns partials on both backends (the reference:
    one partial), and refuses the prefill band."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, M, K, N, bounds = 2, 3, 640, 256, [0, 128, 256]
    A, AS, RS, _ = acts(P, M, K, "e4m3", True, seed=6, device=device)
    w = prepare_codes(*weights(K, N, 4, device=device), 4)
    cfg = {**impl.DECODE[name], "splits": splits}
    parts = impl.gemm(A, AS, RS, w, bounds, False, "decode", cfg=cfg, defer=True)
    assert parts.dtype == torch.float32 and parts.shape == (splits, M, N)
    want = impl.gemm(A, AS, RS, w, bounds, False, "decode", cfg=cfg)
    assert torch.equal(split_sum(parts), want)
    one = impl.gemm(A, AS, RS, w, bounds, False, "decode", cfg=cfg, defer=True, reduced=True)
    assert one.dtype == torch.float32 and one.shape == (1, M, N) and torch.equal(split_sum(one), want)
    assert torch.equal(one[0], parts.sum(0)) if splits == 1 else True  # one split: the same unrounded tile
    ref = call(A, AS, RS, w, bounds, False, "decode", "reference")
    for backend in ("reference", "triton"):
        got = torch.ops.radiance.w4a8_gemm_partials(A, AS, RS, w.wq, w.wh, w.sz, bounds, 4, False, backend)
        r, mx = gemm_error(split_sum(got), ref)
        assert r <= REL and mx <= 4 * REL, (backend, r, mx)
    with pytest.raises(ValueError, match="decode-band form"):
        impl.gemm(A, AS, RS, w, bounds, False, "prefill", defer=True)
    with pytest.raises(ValueError, match="reduced is a knob of the split partials form"):
        impl.gemm(A, AS, RS, w, bounds, False, "decode", cfg=cfg, reduced=True)


@pytest.mark.parametrize("dynamic", [False, True])
def test_split_partials_compile_fullgraph(dynamic, device):
    """The partials op feeding a producer traces whole under torch.compile (its fake output has a split count of its
    own) and gives the eager bits."""
    A, AS, RS, _ = acts(1, 3, 256, "e4m3", True, device=device)
    w = prepare_codes(*weights(256, 128, 4, device=device), 4)
    res = torch.zeros(3, 128, dtype=torch.bfloat16, device=device)
    g = torch.ones(128, dtype=torch.bfloat16, device=device)

    def f(A, AS, RS):
        p = torch.ops.radiance.w4a8_gemm_partials(A, AS, RS, w.wq, w.wh, w.sz, [0, 128], 4, False, "reference")
        return torch.ops.radiance.add_rms_norm(p, res, g, 1e-6, False, "reference")

    eager = f(A, AS, RS)
    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)(A, AS, RS)
    assert all(torch.equal(u, v) for u, v in zip(eager, compiled, strict=True))


@pytest.mark.skipif(not GPU_CUDA, reason="Gluon mma.sync kernel: NVIDIA GPUs only (the Triton nib8 loop is its twin)")
@pytest.mark.parametrize("name", ["mma2", "mma2p", "mma2n64p", "mma2p2", "mma8p", "mma8n64p", "mma8p:pf0", "mma8p:pf2",
                                  "mma2t", "mma8n64t", "mma8n64t2", "mma2n64t2o12", "mma2t2b32", "mma8n64t2b64",
                                  "mma2n64t2o12r80"])
@pytest.mark.parametrize("elem,grouped,M",
                         [("e4m3", True, 1), ("int8", True, 8), ("e4m3", False, 16), ("int8", False, 5),
                          ("int8", True, 40)])
def test_mma2_configs(name, elem, grouped, M):
    """The register-fed mma.sync decode kernel at 3 splits, P = 2, ragged N == reference (exact operands, fp32 /
    int32 sums: only the summation order differs), both operand kinds (fp16; 8-bit: mma8*), the operands from global
    memory or by TMA (*t: rings of 4 and 2 stages; a split of two groups leaves the 4-stage ring half unfilled), on
    16-token tiles and on 32 / 64 (*b32, *b64: rows past M masked, or two tiles at M = 40)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, K, N = 2, 640, 448 if impl.DECODE[name.partition(":")[0]].get("ring") else 400  # the ring: 64-column blocks
    bounds = [0, 128, N]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device="cuda")
    w = prepare_codes(*weights(K, N, 4, device="cuda"), 4)
    ref = call(A, AS, RS, w, bounds, False, "decode", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device="cuda")
    name, _, pf = name.partition(":pf")  # the kept configs, and mma8p's prefetch depths 0 and 2
    impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out,
              cfg={**impl.DECODE[name], "splits": 3, **({"pf": int(pf)} if pf else {})})
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not GPU_CUDA, reason="Gluon mma.sync kernel: NVIDIA GPUs only (the Triton nib8 loop is its twin)")
@pytest.mark.parametrize("name", ["mma2n64t2s", "mma8n64t2s", "mma2t2s", "mma8t2s", "mma2n64t2so12",
                                  "mma8n64t2so12", "mma8n64t2so6", "mma2n64t2so16", "mma8n64t2so16", "wgn64t2o8",
                                  "wgt4o4", "wgn64t2o8r56", "mma2n64t2so16r64", "mma8n64t2so16r64"])
@pytest.mark.parametrize("elem,grouped,M",
                         [("e4m3", True, 1), ("int8", True, 8), ("e4m3", False, 5), ("int8", False, 3),
                          ("e4m3", True, 16), ("int8", False, 13), ("int8", True, 9), ("e4m3", True, 64),
                          ("int8", False, 33)])
def test_mma2_swap_configs(name, elem, grouped, M):
    """Swap-AB (weights on the MMA's rows, tokens on its 8 columns, from the ring; M > 8 in token tiles of 8, up to
    the decode band's 64; wg*: on wgmma, one token tile of 8-64, rows past M masked) == reference at 3 splits, P = 2,
    ragged N; past the decode band it refuses. The register-capped configs too, the wgmma one where it is meant to
    run, M <= 16 (its cap is below what the 64-token accumulator needs: ptxas refuses it there)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    if impl.DECODE[name]["maxnreg"] and impl.DECODE[name]["wg"] and M > 16:
        pytest.skip(f"{name}: a register cap for M <= 16")
    P, K, N, bounds = 2, 640, 448, [0, 128, 448]  # ragged for 128-column tiles (the ring: 64-column blocks)
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device="cuda")
    w = prepare_codes(*weights(K, N, 4, device="cuda"), 4)
    ref = call(A, AS, RS, w, bounds, False, "decode", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out, cfg={**impl.DECODE[name], "splits": 3})
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)
    with pytest.raises(ValueError, match="mma2 is a decode kernel for M <= 64"):
        impl.config(65, N, K, "decode", False, impl.DECODE[name])


@pytest.mark.skipif(not GPU_CUDA, reason="Gluon mma.sync kernel: NVIDIA GPUs only (the Triton nib8 loop is its twin)")
@pytest.mark.parametrize("name", ["mma2t2s", "mma2n64t2s", "mma2n64t2so12", "mma2t2", "mma2n64t2o12", "mma2t",
                                  "mma8t2s", "mma8n64t2so12", "mma8n64t2"])
@pytest.mark.parametrize("elem,grouped,M",
                         [("e4m3", True, 1), ("int8", True, 8), ("e4m3", False, 5), ("int8", False, 16),
                          ("int8", False, 3), ("e4m3", True, 12), ("int8", True, 48)])
def test_mma2_int5(name, elem, grouped, M):
    """int5 weights on the ring configs (the fifth-bit bytes by TMA beside the nibbles; fp16 operands, or int8 x int8
    for int8 activations; swap-AB at M = 16 in two token tiles) == reference at 3 splits, P = 2, ragged N; the 8-bit
    operands refuse int5 with e4m3 activations, the register-fed configs refuse int5."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, K, N, bounds = 2, 640, 448, [0, 128, 448]  # ragged for 128-column tiles (the ring: 64-column blocks)
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device="cuda")
    w = prepare_codes(*weights(K, N, 5, device="cuda"), 5)
    ref = call(A, AS, RS, w, bounds, False, "decode", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device="cuda")
    cfg = {**impl.DECODE[name], "splits": 3}
    if cfg["k8"] and elem == "e4m3":
        with pytest.raises(ValueError, match="int5 weights run on the mma2 ring configs"):
            impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out, cfg=cfg)
        return
    impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out, cfg=cfg)
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)
    refused = ["mma2p", "wgn64t2o8"] + ([] if elem == "int8" else ["mma8t2s" if M <= 8 else "mma8n64t2"])
    for other in refused:
        with pytest.raises(ValueError, match="int5 weights run on the mma2 ring configs"):
            impl.gemm(A, AS, RS, w, bounds, False, "decode", out=out, cfg={**impl.DECODE[other], "splits": 3})


def test_mma2_fifth_bit_placement():
    """The int5 operand builders' integer steps, emulated on the CPU for every fifth-bit byte and random code words:
    fp16 pairs (the nibble pair as ``1024 + q`` / ``1024 + 16 q`` with the fifth bits ORed in, then the exact fix to
    ``q - 16``) and 8-bit codes (four code bytes ``q``) are the 5-bit codes the kernel's layout holds."""
    mma2 = importlib.import_module("radiance_kernels.ops.w4a8_gemm.mma2")
    g = torch.Generator().manual_seed(5)
    words = torch.randint(0, 2**32, (16,), generator=g, dtype=torch.int64).tolist()
    for j, k8, w, hb in itertools.product(range(4), (False, True), words, range(256)):
        q = [(w >> 4 * i & 15) | (hb >> i & 1) << 4 for i in range(8)]  # nibble i's 5-bit code
        keep, mul, mask = mma2.fifth_bits(j, k8)
        fifth = (hb & keep) * mul & mask
        if k8:
            if j > 1:
                continue
            x = (w >> 4 * j) & 0x0F0F0F0F | fifth
            assert [x >> 8 * b & 0xFF for b in range(4)] == [q[j + 2 * b] for b in range(4)]
        else:
            t = (w >> 8 * (j // 2)) & (0x00F000F0 if j % 2 else 0x000F000F) | 0x64006400 | fifth
            halves = struct.unpack("<2e", t.to_bytes(4, "little"))
            got = [h / 16 - 80 if j % 2 else h - 1040 for h in halves]
            assert got == [q[j] - 16, q[j + 4] - 16], (j, hex(w), hb)


MMA2_SM90 = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from radiance_kernels.ops.w4a8_gemm.mma2 import _w4a8_mma2_kernel as kernel
from radiance_kernels.ops.w4a8_gemm.triton import DECODE
out = []
from triton.experimental.gluon import language as gl
from radiance_kernels.ops.w4a8_gemm.tma_tiles import layout
VARIANTS = ((False, 2, False, 0, 0, 0, 4), (True, 0, False, 0, 0, 0, 4), (False, 1, True, 0, 0, 0, 4),
            (True, 2, True, 0, 0, 0, 4), (True, 1, True, 4, 0, 1, 4), (False, 1, False, 4, 0, 0, 4),
            (True, 0, True, 2, 1, 0, 4), (False, 0, False, 2, 1, 1, 4), (False, 0, False, 2, 1, 1, 5),
            (True, 0, False, 2, 0, 0, 5), (True, 0, True, 2, 1, 0, 5), (True, 0, True, 2, 0, 1, 5))
WG = ((False, 0, True, 2, 1, 0, 4, 16), (True, 0, True, 4, 1, 1, 4, 64))  # + the wgmma form's token tile
CAP = {n: DECODE[n]["maxnreg"] for n in ("mma2n64t2so16r64", "mma8n64t2so16r64", "mma2n64t2o12r80", "wgn64t2o8r56")}
CAPPED = ((False, 0, False, 2, 1, 1, 4, 0, CAP["mma2n64t2so16r64"]),  # + the register cap of the named config
          (True, 0, True, 2, 1, 1, 4, 0, CAP["mma8n64t2so16r64"]),
          (False, 0, False, 2, 0, 1, 4, 0, CAP["mma2n64t2o12r80"]),
          (False, 0, True, 2, 1, 1, 4, 16, CAP["wgn64t2o8r56"]), (True, 0, True, 2, 1, 1, 4, 16, CAP["wgn64t2o8r56"]))
for int8, pf, k8, st, swap, trigger, bits, wg, cap in ([v + (0, None) for v in VARIANTS] + [v + (None,) for v in WG]
                                                       + list(CAPPED)):
    BM = wg or (8 if swap else 16)
    ce = dict(BITS=bits, INT8=int8, GROUP_AS=True, SPLIT=2, RW=4, HW=True, BM=BM, BN=64, BK=128, PF=0 if st else pf,
              K8=k8, STAGES=st, GPS=16, ABLATE=0, SWAP=bool(swap), TRIGGER=bool(trigger), WAIT=bool(trigger),
              WG=bool(wg))
    types = {"a_ptr": "*i8" if int8 else "*u8", "as_ptr": "*fp32", "rs_ptr": "*fp32", "ws_ptr": "*fp32",
             "out_ptr": "*bf16", "cnt_ptr": "*i32"}
    if st:
        types |= {"a_ptr": f"tensordesc<i64[{BM}, 16],{layout([BM, 16], gl.int64)!r}>",
                  "wq_ptr": f"tensordesc<i32[1, 16, 2, 32],{layout([1, 16, 2, 32], gl.int32)!r}>",
                  "sz_ptr": f"tensordesc<i32[64],{layout([64], gl.int32, False)!r}>"}
        if bits == 5:
            types["wh_ptr"] = f"tensordesc<u8[16, 64],{layout([16, 64], gl.uint8, False)!r}>"
    sig = {n: "constexpr" if n in ce else types.get(n, "*i32" if n.endswith("_ptr") else "i32")
           for n in kernel.arg_names}
    c = triton.compile(GluonASTSource(fn=kernel, signature=sig, constexprs=ce),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4 if wg else 2, "maxnreg": cap})
    ptx = c.asm["ptx"]
    info = ptxas_v(ptx) if cap else ""  # what ptxas makes of the capped PTX: registers and spill bytes
    head = ptx.split("atom.")[0]
    loop = head[re.search(r"\\b(wg)?mma[.]", head).start():]  # first MMA to the epilogue's atomic (rows staged before)
    wgmma = re.findall(r"wgmma[.]mma_async[.]sync[.]aligned[.](m64n\\d+k32)[.](\\w+)[.](\\w+)[.]\\w+ [{][^}]*[}], [{]",
                       ptx)  # shape, accumulator and A elements, with A from registers
    out.append(dict(int8=int8, k8=k8, st=st, wg=wg, wgmma=sorted(set(wgmma)),
                    mma=sorted(set(re.findall(r"mma[.]sync[.]aligned[.]([.\\w]+)", ptx))),
                    n_mma=ptx.count("mma.sync.aligned"), cvt="cvt.rn.f16x2.e4m3x2" in ptx,
                    shared=c.metadata.shared, st_loop=bool(re.search(r"st[.]shared", loop)),
                    tma=ptx.count("cp.async.bulk.tensor"), trigger=trigger, bits=bits,
                    gdc=[ptx.count("griddepcontrol." + w) for w in ("wait", "launch_dependents")], cap=cap,
                    regs=[int(n) for n in re.findall(r"Used (\\d+) registers", info)],
                    spills=[int(n) for n in re.findall(r"(\\d+) bytes spill", info)]))
print(json.dumps(out))
"""
#: the MMA each operand kind compiles to (8-bit operands: e4m3 x e4m3 or s8 x s8, k32; else fp16, k16)
MMA2_KINDS = {(False, False): "m16n8k16.row.col.f32.f16.f16.f32", (True, False): "m16n8k16.row.col.f32.f16.f16.f32",
              (False, True): "m16n8k32.row.col.f32.e4m3.e4m3.f32",
              (True, True): "m16n8k32.row.col.satfinite.s32.s8.s8.s32"}


def test_mma2_compiles_for_sm90():
    """The Gluon kernel compiles for sm_90 with this environment's Triton (the H200 runs 3.6): ptxas accepts its
    inline PTX, each operand kind issues its MMA (8-bit operands: k32, half as many), the fp16 kind converts e4m3
    activations by the paired convert, and nothing is stored to shared memory from the first MMA to the epilogue's
    atomic (no operand staging: the ring's words come by TMA, its ``[1, 16, 2, 32]`` / ``[64]`` tiles in four stages;
    the fragments' relabelling from them is register-only, else the compile fails); with TRIGGER and WAIT (set
    together where launches chain) it lets the next launch start once and waits for the one before it once. The
    wgmma form (WG) issues wgmma with the weight codes as its register A operand and the token tile as its N. The
    register-capped configs (``REGISTER_CAPS``, int4) fit their caps — the wgmma one at 16 tokens — spilling at most
    8 bytes."""
    for r in compiled_for_sm90(MMA2_SM90):
        if r["cap"]:
            assert len(r["regs"]) == 1 and r["regs"][0] <= r["cap"] and max(r["spills"]) <= 8, r
        if r["wg"]:  # wgmma, its A operand (the weight codes) from registers, the token tile on its N; no mma.sync
            el = "s8" if r["int8"] else "e4m3"
            assert r["wgmma"] == [[f"m64n{r['wg']}k32", "s32" if r["int8"] else "f32", el]] and not r["mma"], r
            assert r["tma"] >= 3 and not r["st_loop"] and r["gdc"] == [r["trigger"], r["trigger"]], r
            continue
        assert r["mma"] == [MMA2_KINDS[r["int8"], r["k8"]]], r
        assert r["n_mma"] >= (4 if r["k8"] else 8) and not r["st_loop"], r
        assert r["cvt"] == (not r["int8"] and not r["k8"]), r
        assert r["gdc"] == [r["trigger"], r["trigger"]], r  # WAIT: for the launch before; TRIGGER: the next may start
        if r["st"]:  # int5: a fourth tile, the fifth-bit bytes [16, 64]
            fifth = r["bits"] == 5
            assert r["tma"] >= 3 + fifth, r
            assert r["shared"] >= r["st"] * ((16 * 64 + 64) * 4 + 8 * 128 + fifth * 16 * 64), r
        else:
            assert r["shared"] <= 16 and r["tma"] == 0, r


WGMMA_SM90 = """
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from radiance_kernels.ops.w4a8_gemm import wgmma
from radiance_kernels.ops.w4a8_gemm.tma_tiles import layout
out = []
for int8, grouped, BM, nw, ws in ((True, True, 128, 8, False), (False, False, 64, 4, False), (True, True, 128, 4, True),
                                  (False, False, 128, 4, True)):
    kernel = wgmma._w4a8_wgmma_ws_kernel if ws else wgmma._w4a8_wgmma_kernel
    el, gel = ("i8", gl.int8) if int8 else ("fp8e4nv", gl.float8e4nv)
    lay = lambda rows: layout([rows, 128], gel)
    lsc = layout([128], gl.float32, False)
    ce = dict(INT8=int8, GROUP_AS=grouped, BM=BM, BN=128, STAGES=4, GROUP_M=8, BK=128, ZFOLD=int8)
    if ws:
        ce["MMA_REGS"] = wgmma.WS_MMA_REGS
    ar = BM // 2 if ws else BM
    types = {"a_desc": f"tensordesc<{el}[{ar}, 128],{lay(ar)!r}>", "w_desc": f"tensordesc<{el}[128, 128],{lay(128)!r}>",
             "sc_desc": f"tensordesc<fp32[128],{lsc!r}>", "as_ptr": "*fp32", "rs_ptr": "*fp32", "out_ptr": "*bf16"}
    sig = {n: "constexpr" if n in ce else types.get(n, "i32") for n in kernel.arg_names}
    opts = {"num_warps": nw, **({"maxnreg": wgmma.WS_LAUNCH_REGS} if ws else {})}
    c = triton.compile(GluonASTSource(fn=kernel, signature=sig, constexprs=ce), target=GPUTarget("cuda", 90, 32),
                       options=opts)
    ptx = c.asm["ptx"]
    info = ptxas_v(ptx)
    out.append(dict(int8=int8, ws=ws, serialized=[l for l in info.splitlines() if "serialized" in l],
                    wgmma=sorted(set(re.findall(r"wgmma[.]mma_async[.]sync[.]aligned[.]([.\\w]+)", ptx))),
                    waits=sorted(set(re.findall(r"wgmma[.]wait_group[.]sync[.]aligned (\\d+)", ptx))),
                    tma=ptx.count("cp.async.bulk.tensor"), shared=c.metadata.shared,
                    regs=sorted(set(re.findall(r"setmaxnreg[.](\\w+)[.]sync[.]aligned[.]u32\\s+(\\d+)", ptx))),
                    cta_bars=len(re.findall(r"\\bbar[.]sync\\s+0;", ptx)),
                    part_bars=sorted(set(re.findall(r"\\bbar[.]sync\\s+(\\d+), 128;", ptx))),
                    empty_init=len(re.findall(r"mbarrier[.]init[.]shared::cta[.]b64 \\[%r\\d+\\], 2;", ptx))))
print(json.dumps(out))
"""


def test_wgmma_compiles_for_sm90():
    """The Gluon Hopper prefill kernels compile for sm_90 with this environment's Triton (the H200 runs 3.6):
    s8 x s8 -> s32 and e4m3 x e4m3 -> f32 wgmma from shared memory (k32, N = 128), waits that keep one group's MMA in
    flight (1) and drain (0), TMA loads of the operand and scale tiles. The ``ws`` form: its loader's warpgroup
    drops to 24 registers and the MMA warpgroups rise to :data:`WS_MMA_REGS`; each MMA warpgroup syncs only its own
    128 threads (named barriers), never the CTA, and the stages' ``empty`` barriers wait for both warpgroups. ptxas
    keeps the wgmmas asynchronous: no "wgmma.mma_async instructions are serialized" report (C7514 serialised every
    wgmma of sessions 7-21's kernels, each k32 instruction waiting for the one before)."""
    from radiance_kernels.ops.w4a8_gemm import wgmma

    rows = compiled_for_sm90(WGMMA_SM90)
    assert [r["ws"] for r in rows] == [False, False, True, True]
    for r in rows:
        kind = "m64n128k32.s32.s8.s8" if r["int8"] else "m64n128k32.f32.e4m3.e4m3"
        assert r["wgmma"] == [kind] and r["waits"] == ["0"] and not r["serialized"], r
        assert r["tma"] >= 4 and r["shared"] > 4 * 128 * 128, r
        if r["ws"]:
            assert ["dec", "24"] in r["regs"] and ["dec", str(wgmma.WS_MMA_REGS)] in r["regs"], r
            assert r["cta_bars"] == 0 and len(r["part_bars"]) == 2 and r["empty_init"] == 4, r  # STAGES


def test_mma8_code_tables():
    """The 8-bit operands' code tables (two ``prmt`` sources in ``mma2``): byte q of the pair is e4m3(q) / int8(q)
    for q = 0..7 and 8..15, and every entry's top bit is 0 (a selector nibble with its top bit set then yields 0)."""
    import re

    from radiance_kernels.ops.w4a8_gemm import mma2

    for tables, dtype in ((mma2._E4M3_TABLES, torch.float8_e4m3fn), (mma2._INT8_TABLES, torch.int8)):
        words = [int(w, 16) for w in re.findall(r"0x[0-9A-F]{8}", tables)]
        table = torch.tensor([(w >> (8 * b)) & 0xFF for w in words for b in range(4)], dtype=torch.uint8)
        assert torch.equal(table.view(dtype).float(), torch.arange(16.0))
        assert not (table & 0x80).any()


def test_mma2_refuses_where_it_cannot_run(device):
    """Off NVIDIA (and under the interpreter) or with int5 weights the mma2 config names what it needs."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    A, AS, RS, _ = acts(1, 2, 256, "e4m3", True, device=device)
    w5 = prepare_codes(*weights(256, 256, 5, device=device), 5)
    with pytest.raises(ValueError, match="mma2 (ring )?config"):  # GPUs: int5 needs a ring config
        impl.gemm(A, AS, RS, w5, [0, 256], False, "decode", cfg=impl.DECODE["mma2"])
    with pytest.raises(ValueError, match="mma2 is a decode kernel for M <= 64"):
        impl.config(65, 256, 256, "decode", True, impl.DECODE["mma2"])
    with pytest.raises(ValueError, match="mma2 is a decode kernel"):
        impl.config(8, 256, 256, "prefill", True, impl.DECODE["mma2"])
    assert impl.config(40, 256, 256, "decode", True, impl.DECODE["mma2"])["BM"] == 16  # 16-token tiles, 3 of them
    assert impl.config(40, 256, 256, "decode", True, impl.DECODE["mma8n64t2b64"])["BM"] == 64  # one 64-token tile
    with pytest.raises(ValueError, match="token tiles are 16, 32 or 64"):
        impl.config(40, 256, 256, "decode", True, {**impl.DECODE["mma2t2"], "BM": 128})


def test_mma2_ring_knobs_are_checked():
    """The TMA ring is an mma2 knob with a valid depth, no register prefetch beside it, and its own ablation."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    ring = impl.DECODE["mma8n64t2"]
    assert impl.config(8, 512, 1024, "decode", False, ring)["ring"] == 2
    for bad, match in (({"ring": 7}, "ring"), ({"pf": 1}, "pf 0 with a ring"), ({"mma2": False}, "knobs of the mma2"),
                       ({"ring": 0, "ablate": "ring"}, "ablate"), ({"wg": True}, "wg .wgmma decode. is a swap-AB")):
        with pytest.raises(ValueError, match=match):
            impl.config(8, 512, 1024, "decode", False, {**ring, **bad})
    wg = impl.DECODE["wgn64t2o8"]  # one token tile of 8 to 64 on wgmma, 64 weight rows per warpgroup
    tiles = [impl.config(m, 512, 1024, "decode", False, wg)["BM"] for m in (1, 8, 9, 16, 17, 64)]
    assert tiles == [8, 8, 16, 16, 32, 64]
    for bad in ({"k8": False}, {"BN": 128}, {"ablate": "nofold"}, {"swap": False}):
        with pytest.raises(ValueError, match="wg .wgmma decode. is a swap-AB"):
            impl.config(8, 512, 1024, "decode", False, {**wg, **bad})
    for name in ("nib8x", "swap"):  # the mma2 kernel's ablations are named on the nib8 loops
        with pytest.raises(ValueError, match="'nofold' is an mma2 one"):
            impl.config(8, 512, 1024, "decode", False, {**impl.DECODE[name], "ablate": "nofold"})


def test_split_reduction_width_auto():
    """rw unset: mma2 configs take the width with the fewest L2 round trips of their reduction (ties: narrower), every
    other kernel 4; a config that names its rw keeps it, a bad one is named."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    # (config, M, splits) -> (rw, round trips): the wgmma form at 64 tokens reads [32, 64] chunks 4 partials a step
    for (name, m, splits), want in {("wgn64t2o4", 64, 6): (4, 4), ("wgn64t2o4", 64, 12): (4, 6),
                                    ("wgn64t2o4", 16, 6): (8, 1), ("mma2t2s", 8, 12): (8, 2),
                                    ("mma8n64t2", 16, 12): (4, 3), ("mma8n64t2so6", 8, 1): (1, 1)}.items():
        cfg = impl.config(m, 5120, 6144, "decode", False, {**impl.DECODE[name], "splits": splits})
        steps = impl.reduce_steps(cfg["BM"], cfg["BN"], cfg["rw"], cfg["num_warps"], splits)
        assert (cfg["splits"], cfg["rw"], steps) == (splits, *want), (name, m, cfg)
        assert all(impl.reduce_steps(cfg["BM"], cfg["BN"], rw, cfg["num_warps"], splits) >= steps
                   for rw in impl.RW_WIDTHS)
    for name in ("nib8", "swap"):
        assert impl.config(8, 5120, 6144, "decode", False, {**impl.DECODE[name], "splits": 16})["rw"] == 4
    assert impl.config(8, 5120, 6144, "decode", False, {**impl.DECODE["gemv128_o16r"], "splits": 16})["rw"] == 16
    assert impl.config(8, 5120, 6144, "decode", False, {**impl.DECODE["mma2t2s"], "splits": 12, "rw": 4})["rw"] == 4
    with pytest.raises(ValueError, match="rw"):
        impl.config(8, 5120, 6144, "decode", False, {**impl.DECODE["mma2t2s"], "rw": 3})


def test_split_reduction_chunks():
    """The mma2 reduction's chunk rows: a power of two dividing the tile, its RW partials and their sum at most
    REDUCE_VALUES (80) values per thread, at least the rows one pass of 16-byte column vectors covers."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    assert impl.REDUCE_VALUES == 80  # the budget ptxas was checked at (sm90_report: wg at BM = 64, 128 registers)
    for bm, bn, nw, rw in itertools.product((8, 16, 32, 64), (64, 128), (2, 4, 8), impl.RW_WIDTHS):
        if bn != 16 * nw and (bn, nw) != (64, 2) and (bn, nw) != (128, 4):
            continue
        rows = impl.reduce_rows(bm, bn, rw, nw)
        assert rows & (rows - 1) == 0 and bm % rows == 0, (bm, bn, nw, rw, rows)
        floor = min(bm, 128 * nw // bn)
        assert rows == floor or (rw + 1) * rows * bn <= impl.REDUCE_VALUES * 32 * nw, (bm, bn, nw, rw, rows)
        assert rows == bm or (rw + 1) * 2 * rows * bn > impl.REDUCE_VALUES * 32 * nw, (bm, bn, nw, rw, rows)


def test_decode_runs_gemv_by_default(monkeypatch, device):
    """Both activation elements at M <= GEMV_MAX_M take the gemv kernel with no cfg, above it the MMA kernel."""
    from radiance_kernels.ops.w4a8_gemm import gemv
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    launched = []

    class Spy:
        def __init__(self, kernel):
            self.kernel, self.arg_names = kernel, kernel.arg_names

        def __getitem__(self, grid):
            launched.append(self.kernel.fn.__name__)
            return self.kernel[grid]

    monkeypatch.setattr(gemv, "_w4a8_gemv_kernel", Spy(gemv._w4a8_gemv_kernel))
    monkeypatch.setattr(impl, "_w4a8_kernel", Spy(impl._w4a8_kernel))
    w = prepare_codes(*weights(256, 256, 4, device=device), 4)
    for elem, M in (("int8", impl.GEMV_MAX_M), ("int8", impl.GEMV_MAX_M + 1), ("e4m3", 1),
                    ("e4m3", impl.GEMV_MAX_M + 1)):
        A, AS, RS, _ = acts(1, M, 256, elem, True, device=device)
        r, _ = gemm_error(impl.gemm(A, AS, RS, w, [0, 256], True, "auto"),
                          call(A, AS, RS, w, [0, 256], True, "auto", "reference"))
        assert r <= REL
    assert launched == ["_w4a8_gemv_kernel", "_w4a8_kernel", "_w4a8_gemv_kernel", "_w4a8_kernel"]


def test_register_cap_reaches_the_launch(monkeypatch, device):
    """A config's ``maxnreg`` is passed to the launch of every decode kernel: the nib8 loop's (``nib8xpr``) and the
    gemv / mma2 kernels', whose launch keeps only their own constexprs (the gemv kernel here, the same path)."""
    from radiance_kernels.ops.w4a8_gemm import gemv
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    caps = []

    class Spy:
        def __init__(self, kernel):
            self.kernel, self.arg_names = kernel, kernel.arg_names

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                caps.append(kwargs.get("maxnreg"))
                return self.kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(gemv, "_w4a8_gemv_kernel", Spy(gemv._w4a8_gemv_kernel))
    monkeypatch.setattr(impl, "_w4a8_kernel", Spy(impl._w4a8_kernel))
    w = prepare_codes(*weights(256, 256, 4, device=device), 4)
    A, AS, RS, _ = acts(1, 2, 256, "int8", True, device=device)
    for cfg in (impl.DECODE["nib8xpr"], {**impl.DECODE["gemv_o8"], "maxnreg": 96}, impl.DECODE["gemv_o8"]):
        impl.gemm(A, AS, RS, w, [0, 256], True, "decode", cfg=cfg)
    assert caps == [168, 96, None]


#: (config, bits, elem, grouped, zpe): each predeq config with both activation elements and both widths.
PREDEQ_VARIANTS = [("deq", 4, "e4m3", True, False), ("deq", 5, "int8", True, True),
                   ("deqm64", 5, "e4m3", False, True), ("deqn64", 4, "int8", False, False),
                   ("deqm64s2", 4, "int8", True, True),
                   ("deqs4", 4, "e4m3", False, True), ("deqs4", 5, "int8", True, False),
                   ("deq64", 5, "e4m3", True, False), ("deq64", 4, "int8", True, True)]


@pytest.mark.parametrize("bits,int8", list(itertools.product([4, 5], [False, True])))
def test_unpack_w8_bit_exact(bits, int8, device):
    """predeq's operand ``w8 [N, K]`` = ``q - 2^(b-1)`` as e4m3 codes / int8, K-contiguous (N = 96: a masked
    column tile), and with ``scales`` the wgmma kernel's column factors, bit-exact."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    w = prepare_codes(*weights(256, 96, bits, device=device), bits)
    c = unprepare(w)[0] - (1 << (bits - 1))
    want = c.to(torch.int8) if int8 else e4m3.encode(c.double())
    got, sc = impl.unpack_w8(w, int8, scales=True)
    assert got.shape == (96, 256) and got.is_contiguous() and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want.T.cpu())
    _, d, s = unprepare(w)  # wgmma's column factors: rows 2g, 2g + 1 = s, s * (z - 2^(b-1))
    s = s.float()
    want_sc = torch.stack([s, s * (d - (1 << (bits - 1))).float()], 1).view(-1, 96)
    assert torch.equal(sc.cpu(), want_sc.cpu())
    assert torch.equal(impl.unpack_w8(w, int8).cpu(), got.cpu())


@pytest.mark.parametrize("bits,int8", [(4, False), (4, True), (5, True)])
def test_unpack_w8_zfold_bit_exact(bits, int8, device):
    """The operand with the zero folded in, ``w8 = q - z``, where it is exact: e4m3 for int4 (blockwise's and the
    wgmma kernel's), int8 for both widths (the wgmma kernel's); zero-point extremes. With int8 the column factors'
    second row is the exponent trick's offset times the scale, ``-1.5 * 2^23 * s``, exact (the fold's FMA
    subtracts it: s is fp16, so the product needs 12 of fp32's 24 bits)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    codes, zeros, scales = weights(256, 96, bits, zkind="extremes", device=device)
    w = prepare_codes(codes, zeros, scales, bits)
    q, z, s = unprepare(w)
    c = q - z.repeat_interleave(128, 0)
    want = c.to(torch.int8) if int8 else e4m3.encode(c.double())
    got, sc = impl.unpack_w8(w, int8, zfold=True, scales=True)
    assert torch.equal(got.cpu(), want.T.cpu())
    assert torch.equal(impl.unpack_w8(w, int8, zfold=True).cpu(), got.cpu())
    second = -1.5 * 2**23 * s.double() if int8 else s.double() * (z - (1 << (bits - 1))).double()
    want_sc = torch.stack([s.double(), second], 1).view(-1, 96)
    assert torch.equal(sc.double().cpu(), want_sc.cpu())  # exact: fp32 holds each factor without rounding


@pytest.mark.parametrize("bounds", [[0, 96], [0, 64, 96], [0, 16, 48, 96]])
def test_unpack_w8_scale_blocks(bounds, device):
    """Blockwise's launch: the zero-folded e4m3 operand and the scales ``s`` fp32 as one contiguous ``[G, hi - lo]``
    block per partition, at ``G lo`` of the flat output (the library GEMM's ``scale_b`` slices)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    w = prepare_codes(*weights(256, 96, 4, zkind="extremes", device=device), 4)
    _, _, s = unprepare(w)
    w8, sb = impl.unpack_w8(w, False, zfold=True, blocks=bounds)
    assert torch.equal(w8.cpu(), impl.unpack_w8(w, False, zfold=True).cpu())
    want = torch.cat([s[:, lo:hi].float().flatten() for lo, hi in itertools.pairwise(bounds)])
    assert sb.shape == (2 * 96,) and torch.equal(sb.cpu(), want.cpu())
    with pytest.raises(ValueError, match="not both"):
        impl.unpack_w8(w, False, scales=True, blocks=bounds)


def emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype, out=None):
    """``torch._scaled_mm``'s 1x128 x 1x128 recipe in fp64, asserting the layouts torch checks for it: ``a
    [M, K]`` row-major e4m3, ``b [K, N]`` column-major, ``scale_a [M, K/128]`` M-contiguous, ``scale_b [K/128,
    N]`` contiguous, M % 4 == 0 (cuBLASLt)."""
    M, K = a.shape
    N, G = b.shape[1], K // 128
    assert a.dtype == b.dtype == torch.float8_e4m3fn and a.stride(1) == 1 and b.stride(0) == 1 and M % 4 == 0
    assert scale_a.shape == (M, G) and scale_a.stride(0) == 1 and scale_a.stride(1) == M
    assert scale_b.shape == (G, N) and scale_b.is_contiguous() and out_dtype == torch.bfloat16
    da = e4m3.decode(a.view(torch.uint8)).double().view(M, G, 128)
    db = e4m3.decode(b.t().contiguous().view(torch.uint8)).double().view(N, G, 128)
    r = torch.einsum("mgk,ngk,mg,gn->mn", da, db, scale_a.double(), scale_b.double()).to(out_dtype)
    if out is None:
        return r
    out.copy_(r)
    return out


@pytest.mark.parametrize("M,grouped", [(19, True), (20, False)])
def test_blockwise_plumbing(M, grouped, monkeypatch, device):
    """The blockwise config's operands and scales, fed to an emulation of the library call that checks the
    layouts it requires: == reference per partition, rows past M untouched, M % 4 padding. (The library's own
    numerics: the GPU full-shape test.)"""
    from radiance_kernels.ops.w4a8_gemm import blockwise
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    monkeypatch.setattr(blockwise, "unsupported", lambda *a: None)
    monkeypatch.setattr(torch, "_scaled_mm", emulated_scaled_mm)
    P, K, N, bounds = 2, 256, 384, [0, 256, 384]
    A, AS, RS, _ = acts(P, M, K, "e4m3", grouped, seed=5, device=device)
    w = prepare_codes(*weights(K, N, 4, zkind="extremes", device=device), 4)
    ref = call(A, AS, RS, w, bounds, False, "prefill", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device=device)
    impl.gemm(A, AS, RS, w, bounds, False, "prefill", out=out, cfg=impl.PREFILL["blockwise"])
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)


def test_blockwise_unsupported_raises(device):
    """Asked for where it cannot run, the blockwise config names what it needs (no fallback to a kernel)."""
    from radiance_kernels.ops.w4a8_gemm import blockwise
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    A, AS, RS, _ = acts(1, 70, 256, "int8", True, device=device)
    w5 = prepare_codes(*weights(256, 128, 5, device=device), 5)
    with pytest.raises(ValueError, match="blockwise prefill config needs int4 weights with e4m3"):
        impl.gemm(A, AS, RS, w5, [0, 128], True, "prefill", cfg=impl.PREFILL["blockwise"])
    if device == "cpu":
        A, AS, RS, _ = acts(1, 70, 256, "e4m3", True, device=device)
        w4 = prepare_codes(*weights(256, 128, 4, device=device), 4)
        with pytest.raises(ValueError, match="needs an NVIDIA CUDA device"):
            impl.gemm(A, AS, RS, w4, [0, 128], True, "prefill", cfg=impl.PREFILL["blockwise"])
    assert blockwise.unsupported(torch.device("cpu"), 4, False).startswith("an NVIDIA CUDA device")


@pytest.mark.parametrize("name,bits,elem,grouped,zpe", PREDEQ_VARIANTS)
def test_prefill_predeq_configs(name, bits, elem, grouped, zpe, device):
    """Every pre-dequantised prefill config: kernel == reference (rows and, at BN=256, columns masked)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, M, K, N, bounds = 2, 19, 256, 384, [0, 256, 384]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=11, device=device)
    w = prepare_codes(*weights(K, N, bits, device=device), bits)
    ref = call(A, AS, RS, w, bounds, zpe, "prefill", "reference")
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
    impl.gemm(A, AS, RS, w, bounds, zpe, "prefill", out=out, cfg=impl.PREFILL[name])
    r, mx = gemm_error(out, ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)


def test_config_knobs_raise():
    """swap / ablate need the nib8 loop; an unknown ablation is named; predeq is prefill's 8-bit loop only."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    with pytest.raises(ValueError, match="swap / apre / ablate"):
        impl.config(8, 512, 384, "decode", True, {**impl.DECODE["fused"], "swap": True})
    with pytest.raises(ValueError, match="swap / apre / ablate"):
        impl.config(8, 512, 384, "decode", True, {**impl.DECODE["split"], "ablate": "nodot"})
    with pytest.raises(ValueError, match="ablate must be"):
        impl.config(8, 512, 384, "decode", True, {**impl.DECODE["swap"], "ablate": "nomma"})
    with pytest.raises(ValueError, match="BM == 16"):
        impl.config(40, 512, 384, "decode", True, {**impl.DECODE["swap"], "ablate": "nodot"})
    with pytest.raises(ValueError, match="gemv is a decode kernel for M <= "):
        impl.config(impl.GEMV_BM_MAX + 1, 512, 384, "decode", True, impl.DECODE["gemv"])
    with pytest.raises(ValueError, match="gemv has no dot16"):
        impl.config(8, 512, 384, "decode", True, {**impl.DECODE["gemv"], "nib8": True})

    for band, knobs in [("decode", {}), ("prefill", {"dot16": True}), ("prefill", {"nib8": True})]:
        with pytest.raises(ValueError, match="predeq"):
            impl.config(256, 512, 384, band, True, {**impl.PREFILL["deq"], **knobs})
    assert impl.config(256, 512, 384, "prefill", True, impl.PREFILL["deq"])["predeq"]
    with pytest.raises(ValueError, match="blockwise .* is a prefill config"):
        impl.config(8, 512, 384, "decode", True, impl.PREFILL["blockwise"])
    assert not impl.config(256, 512, 384, "prefill", False, impl.PREFILL["k64"])["predeq"]  # not the default's


def test_mma2_swap_config_tiles():
    """swap-AB configs run tiles of 8 tokens — M = 9-16 in two per column tile, up to the decode band's 64 in eight,
    their splits balanced over them —; past the decode band the mma2 kernel refuses, and swap without a ring."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    one, two, eight = (impl.config(M, 5120, 6144, "decode", False, impl.DECODE["mma2n64t2so12"]) for M in (8, 12, 64))
    assert one["BM"] == two["BM"] == eight["BM"] == 8 and one["swap"] and two["swap"] and eight["swap"]
    assert eight["splits"] < two["splits"] < one["splits"]  # more tiles, fewer splits for the same programs per SM
    with pytest.raises(ValueError, match="mma2 is a decode kernel for M <= 64"):
        impl.config(65, 5120, 6144, "decode", False, impl.DECODE["mma2n64t2so12"])
    with pytest.raises(ValueError, match="mma2 swap needs a ring"):
        impl.config(12, 5120, 6144, "decode", False, {**impl.DECODE["mma2n64t2so12"], "ring": 0})


def test_mxfp4_has_no_gemv(device):
    """The gemv knob is the W4A8 op's: the MXFP4 GEMM names it instead of ignoring it."""
    from radiance_kernels.ops.mxfp4_gemm import prepare
    from radiance_kernels.ops.mxfp4_gemm import triton as mx_impl

    A = torch.zeros(1, 2, 256, dtype=torch.uint8, device=device)
    w = prepare(torch.zeros(128, 128, dtype=torch.uint8), torch.full((128, 8), 127, dtype=torch.uint8))
    with pytest.raises(ValueError, match="no gemv kernel"):
        mx_impl.gemm(A, torch.ones(1, 2, device=device), w._replace(wp=w.wp.to(device), ws=w.ws.to(device)),
                     [0, 128], "decode", cfg={"gemv": True})


@pytest.mark.parametrize("name,ablate", [("nib8x", "nodot"), ("swap", "noload")])
def test_ablations_run(name, ablate, device):
    """The bench's ablation rows (wrong results by design) launch and write every output."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    A, AS, RS, _ = acts(1, 5, 384, "e4m3", True, device=device)
    w = prepare_codes(*weights(384, 256, 4, device=device), 4)
    out = impl.gemm(A, AS, RS, w, [0, 256], False, "decode", cfg={**impl.DECODE[name], "ablate": ablate})
    assert out.shape == (5, 256) and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("kind,zkind,P",
                         [("subnormal", "random", 3), ("normal", "extreme", 1), ("subnormal", "extreme", 2)])
def test_triton_edge_codes(kind, zkind, P, device):
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    M, K, N = 16, 384, 384
    bounds = [0, 128, 256, 384][: P] + [N]
    for bits, zpe in [(4, False), (5, True)]:
        A, AS, RS, dec = acts(P, M, K, "e4m3", True, kind=kind, seed=3, device=device)
        if kind == "subnormal":
            assert ((A.cpu().to(torch.int32) & 0x78) == 0).float().mean() > 0.5
        codes, zeros, scales = weights(K, N, bits, zkind=zkind, device=device)
        w = prepare_codes(codes, zeros, scales, bits)
        ref = call(A, AS, RS, w, bounds, zpe, "auto", "reference")
        assert_rounds_exact(ref, dequant_matmul(dec, AS, codes, zeros, scales, bounds))
        for band in ("decode", "prefill", "gemv"):  # gemv: the CUDA-core decode kernel's e4m3 flavour
            out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
            if band == "gemv":
                impl.gemm(A, AS, RS, w, bounds, zpe, "decode", out=out, cfg=impl.DECODE[impl.GEMV_DEFAULT])
            else:
                call(A, AS, RS, w, bounds, zpe, band, "triton", out=out)
            r, mx = gemm_error(out, ref)
            assert r <= REL and mx <= 4 * REL, (bits, band, r, mx)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_out_rows_past_m_untouched(backend, device):
    P, M, K, N, bounds = 1, 5, 256, 128, [0, 128]
    A, AS, RS, _ = acts(P, M, K, "e4m3", False, device=device)
    w = prepare_codes(*weights(K, N, 4, device=device), 4)
    buf = torch.full((M + 6, N), 7.0, dtype=torch.bfloat16, device=device)
    call(A, AS, RS, w, bounds, True, "auto", backend, out=buf)
    assert torch.all(buf[M:] == 7.0)
    assert torch.equal(buf[:M], call(A, AS, RS, w, bounds, True, "auto", backend))


def test_bad_inputs_raise(device):
    A, AS, RS, _ = acts(1, 4, 256, "e4m3", False, device=device)
    w = prepare_codes(*weights(256, 128, 4, device=device), 4)
    with pytest.raises(ValueError, match="RS"):
        call(A, AS, RS[..., :1], w, [0, 128], False, "auto", "reference")
    with pytest.raises(ValueError, match="bounds"):
        call(A, AS, RS, w, [0, 64, 128], False, "auto", "reference")
    with pytest.raises(ValueError, match="band"):
        call(A, AS, RS, w, [0, 128], False, "fast", "reference")
    with pytest.raises(ValueError, match="out"):
        small = torch.empty(2, 128, dtype=torch.bfloat16, device=device)
        call(A, AS, RS, w, [0, 128], False, "auto", "reference", out=small)
    sliced = prepare_codes(*weights(256, 256, 4, device=device), 4)
    sliced = sliced._replace(wq=sliced.wq[:, :128], sz=sliced.sz[:, :128])
    with pytest.raises(ValueError, match="contiguous"):
        call(A, AS, RS, sliced, [0, 128], False, "auto", "triton")
    assert call(A, AS, RS, sliced, [0, 128], False, "auto", "reference").shape == (4, 128)


FULL_MS = [1, 5, 8, 16, 40, 64, 128, 1024, 2048, 8192]
FULL_VARIANTS = [(4, "e4m3", False, False), (5, "int8", True, True), (5, "e4m3", False, True), (4, "int8", True, False)]


def sweep(proj, ms, device):
    """Triton vs reference over ``ms`` for one projection, cycling the variants; rows past M untouched.
    Prefill M also runs the pre-dequantised config "deq", and "blockwise" where it runs (int4 e4m3, sm_90)."""
    from radiance_kernels.ops.w4a8_gemm import blockwise
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    K, N, P = proj.K, proj.N, proj.P
    bounds = list(proj.bounds)
    ws = {bits: prepare_codes(*weights(K, N, bits, seed=K + N, device=device), bits) for bits in (4, 5)}
    for i, M in enumerate(ms):
        bits, elem, grouped, zpe = FULL_VARIANTS[i % len(FULL_VARIANTS)]
        w = ws[bits]
        A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device=device)
        ref = call(A, AS, RS, w, bounds, zpe, "auto", "reference")
        lib = [] if blockwise.unsupported(torch.device(device), bits, elem == "int8") else ["blockwise"]
        for cfg in ["default"] + (["deq", *lib] if M > impl.DECODE_MAX_M else []):
            out = torch.full((M + 3, N), 5.0, dtype=torch.bfloat16, device=device)
            if cfg == "default":
                call(A, AS, RS, w, bounds, zpe, "auto", "triton", out=out)
            else:
                impl.gemm(A, AS, RS, w, bounds, zpe, "auto", out=out, cfg=impl.PREFILL[cfg])
            r, mx = gemm_error(out[:M], ref)
            assert r <= REL and mx <= 4 * REL, (proj, M, cfg, bits, elem, grouped, zpe, r, mx)
            assert torch.all(out[M:] == 5.0)


def test_sweep_small(device):
    """The full-shape sweep's code path on a small 3-partition shape, both bands."""
    sweep(shapes.Proj("tiny.qkv", 256, (128, 64, 64), 1, 1), [1, 40, 70, 5], device)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.all_projections(), ids=lambda p: f"tp{p.tp}-{p.name}")
def test_full_shapes(proj):
    sweep(proj, FULL_MS, "cuda")


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.all_projections(), ids=lambda p: f"tp{p.tp}-{p.name}")
def test_mma2_full_shapes(proj):
    """The register-fed mma.sync decode kernel at the 27B shapes, fp16 operands (mma2*: M = 8 e4m3 per-group on the
    prefetching 2-warp config, M = 16 int8 per-token on the 4-warp one, M = 3 e4m3 per-token on the plain one) and
    8-bit operands (mma8*: int8 M = 8 per-group and M = 16 per-token, e4m3 M = 4 per-group), and the TMA ring (int8
    M = 8 on mma8n64t, e4m3 M = 5 on mma2t); int5 weights on the ring (swap-AB at M = 8 and 1, 16-token tiles; int8
    activations on 8-bit operands too); swap-AB's two token tiles at M = 12-16 (int4 and int5); past 16 tokens
    (M = 40-64) in more token tiles, and on 32- / 64-token tiles (*b32, *b64); on wgmma (wg*: M = 5-64 in one token
    tile, one or two warpgroups, rings of 2 and 4)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    ws = {b: prepare_codes(*weights(proj.K, proj.N, b, seed=proj.K, device="cuda"), b) for b in (4, 5)}
    for M, elem, grouped, name, bits in (
            (8, "e4m3", True, "mma2n64p", 4), (16, "int8", False, "mma2p", 4), (3, "e4m3", False, "mma2", 4),
            (8, "int8", True, "mma8p", 4), (16, "int8", False, "mma8n64p", 4), (4, "e4m3", True, "mma8p", 4),
            (8, "int8", True, "mma8n64t", 4), (5, "e4m3", True, "mma2t", 4), (16, "int8", False, "mma8n64t2o12", 4),
            (3, "e4m3", True, "mma2t2", 4), (8, "int8", True, "mma8n64t2s", 4), (4, "e4m3", False, "mma2n64t2s", 4),
            (8, "e4m3", True, "mma2t2s", 5), (1, "int8", True, "mma2n64t2s", 5), (16, "e4m3", False, "mma2t2", 5),
            (8, "int8", True, "mma8n64t2s", 5), (16, "int8", False, "mma8n64t2o12", 5),
            (16, "int8", True, "mma8n64t2so12", 4), (12, "e4m3", True, "mma2n64t2so12", 4),
            (13, "int8", True, "mma8n64t2so12", 5), (64, "e4m3", True, "mma2n64t2s", 4),
            (40, "int8", False, "mma8n64t2", 4), (48, "int8", True, "mma8n64t2so12", 5),
            (64, "e4m3", True, "mma2t2b64", 4), (40, "int8", True, "mma8n64t2b32", 4),
            (33, "int8", False, "mma8n64t2o12b64", 5), (48, "e4m3", True, "mma2n64t2o12b32", 5),
            (64, "e4m3", True, "wgn64t2o8", 4), (40, "int8", False, "wgt4o4", 4), (16, "e4m3", False, "wgt2o8", 4),
            (5, "int8", True, "wgn64t4o4", 4), (33, "e4m3", True, "wgn64t2o4", 4)):
        w = ws[bits]
        A, AS, RS, _ = acts(proj.P, M, proj.K, elem, grouped, seed=M, device="cuda")
        if impl.DECODE[name].get("ring") and proj.N % 64:  # in_proj_ba (skinny_gemm's in serving)
            with pytest.raises(ValueError, match="64-column blocks"):
                impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", cfg=impl.DECODE[name])
            continue
        ref = call(A, AS, RS, w, list(proj.bounds), False, "decode", "reference")
        out = torch.full((M + 1, proj.N), 5.0, dtype=torch.bfloat16, device="cuda")
        impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", out=out, cfg=impl.DECODE[name])
        r, mx = gemm_error(out[:M], ref)
        assert r <= REL and mx <= 4 * REL, (M, elem, name, bits, r, mx)
        assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.projections(1), ids=lambda p: p.name)
def test_split_partials_full_shapes(proj):
    """The served deferred decode configs (the table's pick for the partials form, one partial where it is marked
    ``reduced``): summed in split order and rounded, the partials are the same config's kernel-reduced output bit for
    bit — so is that config's in-kernel sum handed as one fp32 partial (``reduced``) —, and the reference's at the
    GEMM floor, for both activation elements, int4 and int5, M = 1, 8, 16."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl
    from radiance_kernels.ops.w4a8_gemm import tuned

    for bits in (4, 5):
        w = prepare_codes(*weights(proj.K, proj.N, bits, seed=3, device="cuda"), bits)
        for M, elem in ((1, "e4m3"), (8, "int8"), (8, "e4m3"), (16, "int8"), (16, "e4m3")):
            A, AS, RS, _ = acts(proj.P, M, proj.K, elem, True, seed=M, device="cuda")
            e = tuned.entry(torch.cuda.get_device_name(), "w4a8_gemm", "decode", M, proj.N, proj.K, elem, bits, True)
            name, cfg = e and e["config"], e and impl.DECODE[e["config"]]
            parts = impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", defer=True)
            assert parts.shape[0] == 1 or not (e and e.get("reduced")), (bits, M, elem, name, parts.shape[0])
            want = impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", cfg=cfg)
            assert torch.equal(split_sum(parts), want), (bits, M, elem, name, parts.shape[0])
            one = impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", cfg=cfg, defer=True, reduced=True)
            assert one.shape[0] == 1 and torch.equal(split_sum(one), want), (bits, M, elem, name)
            r, mx = gemm_error(want, call(A, AS, RS, w, list(proj.bounds), False, "decode", "reference"))
            assert r <= REL and mx <= 4 * REL, (bits, M, elem, name, r, mx)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("bits", [4, 5])
def test_served_decode_many_tokens_full_shape(bits):
    """The served path (the tuned pick) on the o_proj / out_proj shape at M = 9-64, where the table picks swap-AB's
    token tiles or several 16-token tiles per column tile: == reference for both activation elements and scale
    granularities."""
    proj = next(p for p in shapes.projections(1) if p.name == "attn.o_proj")
    w = prepare_codes(*weights(proj.K, proj.N, bits, seed=7, device="cuda"), bits)
    for M, elem, grouped in ((9, "e4m3", True), (12, "int8", True), (16, "e4m3", True), (16, "int8", False),
                             (13, "e4m3", False), (24, "int8", True), (40, "e4m3", True), (64, "int8", False),
                             (64, "e4m3", True)):
        A, AS, RS, _ = acts(proj.P, M, proj.K, elem, grouped, seed=M, device="cuda")
        ref = call(A, AS, RS, w, list(proj.bounds), False, "decode", "reference")
        out = torch.full((M + 1, proj.N), 5.0, dtype=torch.bfloat16, device="cuda")
        call(A, AS, RS, w, list(proj.bounds), False, "auto", "triton", out=out)
        r, mx = gemm_error(out[:M], ref)
        assert r <= REL and mx <= 4 * REL, (M, elem, grouped, bits, r, mx)
        assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.all_projections(), ids=lambda p: f"tp{p.tp}-{p.name}")
def test_gemv_full_shapes(proj):
    """The CUDA-core decode kernel at the 27B shapes, both activation elements: M = 1 int4 on the wide-reduction
    occupancy config, M = 2 int5 on the 8-program one (whatever the tuned table picks)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    for M, bits, name in ((1, 4, "gemv256_o16r"), (2, 5, "gemv_o8r")):
        w = prepare_codes(*weights(proj.K, proj.N, bits, seed=proj.K + M, device="cuda"), bits)
        for elem in ("e4m3", "int8"):
            A, AS, RS, _ = acts(proj.P, M, proj.K, elem, True, seed=M, device="cuda")
            ref = call(A, AS, RS, w, list(proj.bounds), False, "decode", "reference")
            out = torch.full((M + 1, proj.N), 5.0, dtype=torch.bfloat16, device="cuda")
            impl.gemm(A, AS, RS, w, list(proj.bounds), False, "decode", out=out, cfg=impl.DECODE[name])
            r, mx = gemm_error(out[:M], ref)
            assert r <= REL and mx <= 4 * REL, (M, elem, r, mx)
            assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a CUDA machine")
@pytest.mark.parametrize("proj", shapes.projections(1), ids=lambda p: p.name)
@pytest.mark.parametrize("M,grouped", [(130, True), (2048, False), (4100, True)])
def test_blockwise_full_shapes(proj, M, grouped):
    """The library path (int4 e4m3, rows padded to M % 4 at 130) against the reference at the 27B shapes."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    w = prepare_codes(*weights(proj.K, proj.N, 4, seed=proj.N, device="cuda"), 4)
    A, AS, RS, _ = acts(proj.P, M, proj.K, "e4m3", grouped, seed=M, device="cuda")
    ref = call(A, AS, RS, w, list(proj.bounds), False, "prefill", "reference")
    out = torch.full((M + 3, proj.N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, AS, RS, w, list(proj.bounds), False, "prefill", out=out, cfg=impl.PREFILL["blockwise"])
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (M, grouped, r, mx)
    assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not SM90, reason="Gluon wgmma kernel: NVIDIA sm_90 only (the Triton predeq loop is its twin)")
@pytest.mark.parametrize("name", ["wgmma", "wgmmam64", "wgmmaws"])
@pytest.mark.parametrize("bits,elem,grouped,M,K", [(4, "e4m3", True, 19, 256), (4, "int8", True, 130, 768),
                                                  (5, "e4m3", False, 70, 512), (5, "int8", False, 200, 1024),
                                                  (4, "e4m3", False, 129, 1280), (4, "int8", False, 64, 256)])
def test_wgmma_configs(name, bits, elem, grouped, M, K):
    """The Gluon Hopper prefill kernel == reference: both widths and elements (the zero inside the operand for int8
    and int4, the row-sum term for int5 e4m3), token / group scales, P = 2 with a ragged last N-block, G = 2 (no
    steady-state trip) to 10, M off and on the tile; rows past M untouched."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, N, bounds = 2, 400, [0, 256, 400]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=M, device="cuda")
    w = prepare_codes(*weights(K, N, bits, zkind="extremes" if M == 64 else "random", device="cuda"), bits)
    ref = call(A, AS, RS, w, bounds, False, "prefill", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, AS, RS, w, bounds, False, "prefill", out=out, cfg=impl.PREFILL[name])
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)


@pytest.mark.skipif(not SM90, reason="Gluon wgmma kernel: NVIDIA sm_90 only (the Triton predeq loop is its twin)")
@pytest.mark.parametrize("bits,elem,grouped,K", [(4, "int8", True, 256), (5, "e4m3", False, 1280),
                                                 (4, "e4m3", True, 768)])
def test_wgmma_ws_walks_tiles(bits, elem, grouped, K):
    """The persistent warp-specialised form with more tiles than SMs (each program walks 2-3 tiles, its ring's
    stages and phases running on across them) == reference; P = 3 with a ragged last partition, M off the tile."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    P, M, N, bounds = 3, 1500, 3000, [0, 1024, 2048, 3000]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=K, device="cuda")
    w = prepare_codes(*weights(K, N, bits, device="cuda"), bits)
    tiles, sms = -(-M // 128) * -(-N // 128), torch.cuda.get_device_properties(0).multi_processor_count
    assert tiles > 2 * sms, (tiles, sms)
    ref = call(A, AS, RS, w, bounds, False, "prefill", "reference")
    out = torch.full((M + 2, N), 5.0, dtype=torch.bfloat16, device="cuda")
    impl.gemm(A, AS, RS, w, bounds, False, "prefill", out=out, cfg=impl.PREFILL["wgmmaws"])
    r, mx = gemm_error(out[:M], ref)
    assert r <= REL and mx <= 4 * REL, (r, mx)
    assert torch.all(out[M:] == 5.0)


def test_prefill_default_by_element_and_rows(monkeypatch):
    """Where the library path does not run and the Gluon kernel does: above ``WS_MIN_M`` rows the warp-specialised
    form (int8 activations, and int5 with e4m3), fewer rows the 64-row tiles (H200 calls 53, 136, 155; H100 198)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl
    from radiance_kernels.ops.w4a8_gemm import wgmma

    monkeypatch.setattr(impl.blockwise, "unsupported", lambda *a: "not here")
    monkeypatch.setattr(impl, "triton_interpreted", lambda: False)
    monkeypatch.setattr(wgmma, "unsupported", lambda *a: None)
    assert impl.prefill_default("cuda", 4, True, 5120, impl.WS_MIN_M + 1) == "wgmmaws"
    assert impl.prefill_default("cuda", 5, True, 5120, 8192) == "wgmmaws"
    assert impl.prefill_default("cuda", 4, True, 5120, impl.WS_MIN_M) == "wgmmam64"
    assert impl.prefill_default("cuda", 5, False, 5120, 8192) == "wgmmaws"
    assert impl.prefill_default("cuda", 5, False, 5120, impl.WS_MIN_M) == "wgmmam64"
    monkeypatch.setattr(wgmma, "unsupported", lambda *a: "no wgmma")
    assert impl.prefill_default("cuda", 5, True, 5120, 8192) == impl.PREFILL_DEFAULT


def test_wgmma_refuses_narrow_column_blocks():
    """Partition bounds that leave column blocks under 32 wide would put the stages' scale tiles off TMA's 128-byte
    shared alignment (a fault on the H200, call 130): the wgmma kernels refuse them by name."""
    from radiance_kernels.ops.w4a8_gemm import wgmma

    with pytest.raises(ValueError, match="column blocks of at least 32"):
        wgmma.gemm(None, None, None, None, None, [0, 2000, 3000], None, {"BN": 16}, True)


def test_wgmma_refuses_rows_past_32_bit_indices():
    """The row inputs' offsets ``r G + g`` are 32-bit: a call whose P M G reaches 2^31 is refused by name (at the
    kernel's entry, before any operand is read), one row under it is not."""
    from radiance_kernels.ops.w4a8_gemm import wgmma

    K, G = 17408, 17408 // wgmma.GROUP
    over = torch.empty(1, -(-(2**31) // G), K, dtype=torch.int8, device="meta")
    with pytest.raises(ValueError, match="32 bits"):
        wgmma.gemm(over, None, None, None, None, [0], None, {"BN": 128}, True)
    wgmma.check_row_offsets(1, (2**31 - 1) // G, K)
    with pytest.raises(ValueError, match="32 bits"):
        wgmma.check_row_offsets(3, -(-(2**31) // (3 * G)), K)


def test_wgmma_refuses_where_it_cannot_run(device):
    """Off sm_90 (and under the interpreter), or with K not a multiple of 256, the wgmma config names what it
    needs; a config without predeq is refused."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    A, AS, RS, _ = acts(1, 70, 384, "int8", True, device=device)
    w = prepare_codes(*weights(384, 128, 4, device=device), 4)
    with pytest.raises(ValueError, match="wgmma prefill config needs"):
        impl.gemm(A, AS, RS, w, [0, 128], True, "prefill", cfg=impl.PREFILL["wgmma"])
    with pytest.raises(ValueError, match="wgmma .* reads the predeq operand"):
        impl.config(300, 256, 256, "prefill", True, {**impl.PREFILL["wgmma"], "predeq": False})


@pytest.mark.skipif(GPU, reason="CPU tensors through the interpreter (the unpack kernel); GPUs run the kernel itself")
@pytest.mark.parametrize("bits,elem,grouped", [(4, "int8", True), (5, "e4m3", False), (4, "e4m3", True)])
def test_wgmma_host_plumbing(bits, elem, grouped, monkeypatch):
    """The host side of the wgmma config on CPU, the kernel stubbed: the zero goes into the operand exactly where it is
    exact (int8, int4), the descriptors' tiles and element types, the grid and the kernel's constexprs."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl
    from radiance_kernels.ops.w4a8_gemm import wgmma

    launched = {}

    class Stub:
        def __getitem__(self, grid):
            return lambda *args, **kw: launched.update(grid=grid, args=args, kw=kw)

    monkeypatch.setattr(wgmma, "_w4a8_wgmma_kernel", Stub())
    monkeypatch.setattr(wgmma, "unsupported", lambda *a: None)
    P, M, K, N, bounds = 2, 70, 512, 384, [0, 256, 384]
    A, AS, RS, _ = acts(P, M, K, elem, grouped, seed=3)
    w = prepare_codes(*weights(K, N, bits), bits)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    impl.gemm(A, AS, RS, w, bounds, False, "prefill", out=out, cfg=impl.PREFILL["wgmmam64"])
    a_desc, w_desc, sc_desc = launched["args"][:3]
    zfold = elem == "int8" or bits == 4
    assert launched["kw"]["ZFOLD"] == zfold == wgmma.zero_folds(bits, elem == "int8")
    assert launched["kw"]["INT8"] == (elem == "int8") and launched["kw"]["GROUP_AS"] == grouped
    assert launched["grid"] == (-(-M // 64) * (N // 128),) and launched["kw"]["BM"] == 64
    assert a_desc.block_shape == [64, 128] and a_desc.shape == [P * M, K]
    assert w_desc.block_shape == [128, 128] and w_desc.shape == [N, K] and sc_desc.block_shape == [128]
    assert a_desc.base.dtype == w_desc.base.dtype == (torch.int8 if elem == "int8" else torch.float8_e4m3fn)
    want = impl.unpack_w8(w, elem == "int8", zfold=zfold).view(w_desc.base.dtype)
    assert torch.equal(w_desc.base.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.skipif(not (FULL_SHAPES and SM90), reason="RADIANCE_FULL_SHAPES=1 on an sm_90 machine")
@pytest.mark.parametrize("proj", shapes.all_projections(), ids=lambda p: f"tp{p.tp}-{p.name}")
def test_wgmma_full_shapes(proj):
    """The Gluon Hopper prefill kernel at the 27B shapes: int5 e4m3 per-group (the row-sum term) and int5 int8
    per-token (the zero inside the operand) at M = 2048, int4 int8 per-group with M off the tile (M = 300)."""
    from radiance_kernels.ops.w4a8_gemm import triton as impl

    for M, bits, elem, grouped in ((2048, 5, "e4m3", True), (2048, 5, "int8", False), (300, 4, "int8", True)):
        w = prepare_codes(*weights(proj.K, proj.N, bits, seed=proj.N + bits, device="cuda"), bits)
        A, AS, RS, _ = acts(proj.P, M, proj.K, elem, grouped, seed=M, device="cuda")
        ref = call(A, AS, RS, w, list(proj.bounds), False, "prefill", "reference")
        out = torch.full((M + 1, proj.N), 5.0, dtype=torch.bfloat16, device="cuda")
        impl.gemm(A, AS, RS, w, list(proj.bounds), False, "prefill", out=out, cfg=impl.PREFILL["wgmma"])
        r, mx = gemm_error(out[:M], ref)
        assert r <= REL and mx <= 4 * REL, (M, bits, elem, grouped, r, mx)
        assert torch.all(out[M:] == 5.0)


@pytest.mark.parametrize("elem,granularity,zpe", [("e4m3", "token", False), ("int8", "group", True)])
def test_fed_by_rotate_quant(elem, granularity, zpe, device):
    """rotate_quant's (A, AS, RS) into the GEMM: kernel == reference at the bf16 floor, and the result is
    the rotated-activation GEMM up to the 8-bit activation quantisation."""
    from radiance_kernels.formats.rotation import random_rotations, rotate

    P, M, K, N, bounds = 2, 6, 256, 256, [0, 128, 256]
    pairs, theta, cs = random_rotations(P, K, seed=4, device=device)
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).to(device)
    A, AS, RS = torch.ops.radiance.rotate_quant(x, pairs, theta, cs, elem, granularity, "reference")
    codes, zeros, scales = weights(K, N, 5, device=device)
    w = prepare_codes(codes, zeros, scales, 5)
    ref = call(A, AS, RS, w, bounds, zpe, "auto", "reference")
    out = call(A, AS, RS, w, bounds, zpe, "auto", "triton")
    r, mx = gemm_error(out, ref)
    assert r <= REL and mx <= 4 * REL
    W = awq.dequantize(codes.cpu(), zeros.cpu(), scales.cpu()).double()
    exact = torch.cat([rotate(x.cpu(), pairs[p].cpu(), theta[p].cpu(), cs[p].cpu(), torch.float64)
                       @ W[:, bounds[p]:bounds[p + 1]] for p in range(P)], dim=1)
    assert gemm_error(ref.cpu(), exact)[0] < 0.05


def test_opcheck():
    """Schema, fake tensor and AOT dispatch of both custom ops (what torch.compile in vLLM relies on)."""
    A, AS, RS, _ = acts(2, 3, 256, "e4m3", True)
    w = prepare_codes(*weights(256, 256, 5), 5)
    args = (A, AS, RS, w.wq, w.wh, w.sz, [0, 128, 256], 5, True, "auto", "reference")
    torch.library.opcheck(torch.ops.radiance.w4a8_gemm.default, args)
    torch.library.opcheck(torch.ops.radiance.w4a8_gemm_out.default, (torch.zeros(5, 256, dtype=torch.bfloat16), *args))
    torch.library.opcheck(torch.ops.radiance.w4a8_gemm_out.default, (torch.zeros(5, 256, dtype=torch.bfloat16), *args))


def test_gemm_error_allows_one_ulp_not_two():
    """The element bound forgives one bf16 ulp per element (rounding order), not a real error."""
    ref = torch.tensor([1.0078125, 0.5, -0.25], dtype=torch.bfloat16)  # max just above 2^0: ulp 2^-7
    one = ref.clone()
    one[0] = 1.015625  # +1 ulp: 7.75e-3 of the max, above 4 * REL before the allowance
    assert gemm_error(one, ref)[1] == 0.0
    two = ref.clone()
    two[0] = 1.0234375  # +2 ulp: one ulp past the allowance
    assert gemm_error(two, ref)[1] > 4 * REL
