from fractions import Fraction

import pytest
import torch
from conftest import FULL_SHAPES, GPU, compiled_for_sm90

from radiance_kernels import BackendUnavailableError
from radiance_kernels.formats import e4m3
from radiance_kernels.formats.rotation import random_rotations, rotate
from radiance_kernels.ops.rotate_quant import gluon as rq_gluon
from radiance_kernels.ops.rotate_quant import reference
from radiance_kernels.ops.rotate_quant import triton as rq_triton
from radiance_kernels.ops.stream import triton as st

VARIANTS = [(e, g) for e in ("e4m3", "int8") for g in ("group", "token")]


def activations(M: int, K: int, dtype: torch.dtype, seed: int = 0, device="cpu") -> torch.Tensor:
    """Mixed rows: all-zero, input subnormals, an outlier over a tiny row (subnormal e4m3 codes in token
    mode), underflowing scales (fp32), and log-normal magnitudes. Generated on ``device``."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    x = randn(M, K) * torch.exp(2 * randn(M, 1))
    if M > 1:
        x[1] = 0
    if M > 2:
        x[2] = randn(K) * 1e-39
    if M > 3:
        x[3] = randn(K) * 1e-5
        x[3, 7] = 300.0
    if M > 4:
        x[4] = randn(K) * 1e-44
    return x.to(dtype)


def poisoned(P: int, M: int, K: int, elem: str, granularity: str, device) -> dict[str, torch.Tensor]:
    """Output buffers filled with garbage, so an unwritten element cannot pass."""
    a, s, r = reference.output_shapes(P, M, K, granularity)
    return {"A": torch.full(a, 0x5B, dtype=reference.code_dtype(elem), device=device),
            "AS": torch.full(s, float("nan"), device=device), "RS": torch.full(r, float("nan"), device=device)}


def assert_same(got: dict, want: tuple) -> None:
    for name, w in zip(("A", "AS", "RS"), want, strict=True):
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        bad = (g.view(torch.uint8) != w.view(torch.uint8)) if g.dtype.itemsize == 1 else \
            (g.view(torch.int32) != w.view(torch.int32))
        assert not bad.any(), f"{name}: {int(bad.sum())} of {g.numel()} differ, first at {bad.nonzero()[0].tolist()}"


CASES = [(torch.bfloat16, 1, 1, 128), (torch.float16, 2, 5, 384), (torch.float32, 3, 16, 256),
         (torch.bfloat16, 3, 7, 512), (torch.bfloat16, 2, 20, 128)]  # M=20: two row blocks, one partial


@pytest.mark.parametrize("dtype, P, M, K", CASES)
def test_triton_equals_reference_bytewise(device, dtype, P, M, K):
    x = activations(M, K, dtype, seed=M, device=device)
    recs = random_rotations(P, K, seed=K + P, device=device)
    for elem, granularity in VARIANTS:
        want = reference.rotate_quant(x, *recs, elem, granularity)
        got = rq_triton.rotate_quant(x, *recs, elem, granularity, out=poisoned(P, M, K, elem, granularity, device))
        assert_same(got, want)


def test_default_config_follows_m(monkeypatch):
    """A launch naming no config gets the small-M config up to SMALL_M rows and the default above (the Gluon prefill
    kernel takes over from its MIN_M only on the GPUs it was measured on: not here)."""
    assert st.default_config(1) == st.default_config(st.SMALL_M) == st.SMALL_M_DEFAULT != st.DEFAULT
    assert st.default_config(st.SMALL_M + 1) == st.DEFAULT
    seen = []
    monkeypatch.setattr(st, "_prologue_kernel", type("K", (), {"__getitem__": lambda self, grid: lambda *a, **kw:
                                                               seen.append(kw["BM"])})())
    for M in (3, 40):
        rq_triton.rotate_quant(torch.zeros(M, 128), *random_rotations(1, 128), "e4m3", "group")
    assert seen == [st.CONFIGS[st.SMALL_M_DEFAULT]["BM"], st.CONFIGS[st.DEFAULT]["BM"]]


@pytest.mark.parametrize("cfg", sorted(set(st.CONFIGS) - {st.DEFAULT}))
def test_every_config_equals_reference_bytewise(device, cfg):
    """The named launch configs (rows per program, warps, per-token scratch or recompute) against the
    reference; the default config is the one the other tests run (the small-M one at M <= SMALL_M). M=37 leaves
    a partial block at every BM."""
    P, M, K = 2, 37, 256
    x = activations(M, K, torch.bfloat16, seed=5, device=device)
    recs = random_rotations(P, K, seed=11, device=device)
    for elem, granularity in VARIANTS:
        want = reference.rotate_quant(x, *recs, elem, granularity)
        got = rq_triton.rotate_quant(x, *recs, elem, granularity, cfg=cfg,
                                     out=poisoned(P, M, K, elem, granularity, device))
        assert_same(got, want)


@pytest.mark.parametrize("cfg", ("bm4w4", "bm16w4"))
def test_token_scratch_row_chunks(device, cfg, monkeypatch):
    """A scratch cap of 8 rows splits per-token mode into launches over row chunks (bm4w4: 8 rows each, the
    last partial; bm16w4: one block each)."""
    P, M, K = 2, 37, 256
    monkeypatch.setattr(st, "SCRATCH_BYTES", P * K * 4 * 8)
    x = activations(M, K, torch.bfloat16, seed=6, device=device)
    recs = random_rotations(P, K, seed=12, device=device)
    for elem in ("e4m3", "int8"):
        want = reference.rotate_quant(x, *recs, elem, "token")
        got = rq_triton.rotate_quant(x, *recs, elem, "token", cfg=cfg, out=poisoned(P, M, K, elem, "token", device))
        assert_same(got, want)


def test_unknown_config_is_refused():
    x = torch.zeros(2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="prologue cfg 'bm7' is not one of"):
        rq_triton.rotate_quant(x, *random_rotations(1, 128), "e4m3", "group", cfg="bm7")


def test_strided_rows_and_op_dispatch(device):
    M, K, P = 6, 256, 2
    big = activations(M, 2 * K, torch.bfloat16, seed=3, device=device)
    x = big[:, K:]  # row stride 2K
    recs = random_rotations(P, K, seed=9, device=device)
    for elem, granularity in VARIANTS[::3]:
        want = reference.rotate_quant(x.contiguous(), *recs, elem, granularity)
        for backend in ("reference", "triton"):
            got = torch.ops.radiance.rotate_quant(x, *recs, elem, granularity, backend)
            assert_same(dict(zip(("A", "AS", "RS"), got, strict=True)), want)


def test_tables_memoised_per_records_and_invalidated_by_writes():
    from radiance_kernels.formats.rotation import givens_tables
    from radiance_kernels.ops.stream.triton import givens_tables_cached

    pairs, theta, _ = random_rotations(2, 256, seed=6)
    first = givens_tables_cached(pairs, theta)
    assert givens_tables_cached(pairs, theta) is first
    assert givens_tables_cached(pairs, theta.clone()) is not first  # another theta tensor
    theta.mul_(0.5)
    again = givens_tables_cached(pairs, theta)
    assert all(torch.equal(a, b) for a, b in zip(again, givens_tables(pairs, theta), strict=True))
    assert not torch.equal(again[1], first[1])


def test_reference_semantics():
    M, K, P = 5, 256, 2
    x = activations(M, K, torch.float32, seed=1)
    recs = random_rotations(P, K, seed=4)
    xr = torch.stack([rotate(x, recs[0][p], recs[1][p], recs[2][p]) for p in range(P)])
    g = xr.reshape(P, M, 2, 128)
    for elem, qmax in (("e4m3", 448.0), ("int8", 127.0)):
        A, AS, RS = reference.rotate_quant(x, *recs, elem, "group")
        assert torch.equal(AS, g.abs().amax(-1) * torch.tensor(1 / qmax, dtype=torch.float32))
        vals = e4m3.decode(A) if elem == "e4m3" else A.float()
        assert torch.equal(RS, vals.reshape(P, M, 2, 128).double().sum(-1).float())
        assert (AS[:, [1, 4]] == 0).all() and (A.reshape(P, M, K)[:, [1, 4]] == 0).all()  # zero / underflow
        deq = vals.reshape(P, M, 2, 128) * AS[..., None]
        live = AS > 0
        err = ((deq - g).abs().amax(-1) / g.abs().amax(-1).clamp(min=1e-38))[live]
        assert err.max() <= (2.0**-4 if elem == "e4m3" else 1 / 254) * 1.0001
        At, AST, _ = reference.rotate_quant(x, *recs, elem, "token")
        assert torch.equal(AST, g.abs().amax(-1).amax(-1) * torch.tensor(1 / qmax, dtype=torch.float32))
    # token mode on the outlier row reaches the e4m3 subnormal codes
    assert ((At[:, 3] & 0x78) == 0).logical_and((At[:, 3] & 7) != 0).any()


def test_identity_rotation_is_plain_quant():
    M, K = 4, 128
    x = activations(M, K, torch.float32, seed=2)
    pairs = torch.arange(128, dtype=torch.int16).repeat(8, 1)[None]
    theta = torch.zeros(1, 8, 64, dtype=torch.float16)
    cs = torch.ones(1, K, dtype=torch.float16)
    A, AS, _ = reference.rotate_quant(x, pairs, theta, cs, "e4m3", "token")
    live = AS[0] > 0
    q = torch.where(live[:, None], x / torch.where(live, AS[0], 1.0)[:, None], 0.0)
    assert torch.equal(A[0], e4m3.encode(q))


def test_feeds_w4a8_gemm():
    """rotate_quant → w4a8_gemm (reference) reproduces the fp64 rotated linear ((x·cs) Rᵀ) Wᵀ per partition
    up to the activation quantisation (the seeds' ~2.6e-2 for e4m3); checks the AS/RS contract end to end."""
    from radiance_kernels.ops.w4a8_gemm.reference import prepare_codes

    K, N, M, P, bounds = 256, 96, 6, 2, [0, 40, 96]
    recs = random_rotations(P, K, seed=2)
    x = activations(M, K, torch.bfloat16, seed=8)
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (K, N), generator=gen)
    z = torch.randint(2, 15, (K // 128, N), generator=gen)
    s = (torch.rand(K // 128, N, generator=gen) * 0.01 + 0.005).to(torch.float16)
    w = prepare_codes(q, z, s, 4)
    W = (q.double() - z.double().repeat_interleave(128, 0)) * s.double().repeat_interleave(128, 0)  # [K, N]
    exact = torch.cat([rotate(x.double(), recs[0][p], recs[1][p], recs[2][p], dtype=torch.float64)
                       @ W[:, bounds[p]:bounds[p + 1]] for p in range(P)], dim=1)
    for (elem, granularity), bar in zip(VARIANTS, (4e-2, 4e-2, 1.5e-2, 1.5e-2), strict=True):
        A, AS, RS = torch.ops.radiance.rotate_quant(x, *recs, elem, granularity, "reference")
        y = torch.ops.radiance.w4a8_gemm(A, AS, RS, w.wq, w.wh, w.sz, bounds, w.bits, False, "auto", "reference")
        rel = ((y.double() - exact).norm() / exact.norm()).item()
        assert rel <= bar, (elem, granularity, rel)


def test_bad_arguments():
    x = torch.zeros(2, 256, dtype=torch.bfloat16)
    pairs, theta, cs = random_rotations(1, 256)
    with pytest.raises(ValueError, match="theta must be float16"):
        torch.ops.radiance.rotate_quant(x, pairs, theta.float(), cs, "e4m3", "group", "reference")
    with pytest.raises(ValueError, match="x must be"):
        torch.ops.radiance.rotate_quant(x[:, :200], pairs, theta, cs, "e4m3", "group", "reference")
    with pytest.raises(ValueError, match="elem must be"):
        torch.ops.radiance.rotate_quant(x, pairs, theta, cs, "fp8", "group", "reference")
    with pytest.raises(ValueError, match="P<=3"):
        torch.ops.radiance.rotate_quant(x, pairs.repeat(4, 1, 1), theta, cs, "e4m3", "group", "reference")
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        torch.ops.radiance.rotate_quant(x, pairs, theta, cs, "e4m3", "group", "cuda")


_CODEGEN = """
import re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from radiance_kernels.ops.stream import triton as st
found = set()
for cfg, early in ((st.DEFAULT, 0), ("bm1w1e", 1), ("bm1w1p", 2)):  # the group's constants after / before the wait
    consts = dict(PRODUCER=5, GEMMA=False, DT=2, QUANT=True, ELEM=0, TOKEN=False, STORE_HS=False, NL=8, HW=True,
                  BM=st.CONFIGS[cfg]["BM"], SCRATCH=False, NW=st.CONFIGS[cfg]["num_warps"], FOLD=0, TSPLIT=0, XA=2,
                  XB=0, WAIT=True, EARLY=early)
    ptrs = dict(mate_ptr="*i32", cos_ptr="*fp32", sin_ptr="*fp32", cs_ptr="*fp16", q_ptr="*u8", as_ptr="*fp32",
                rs_ptr="*fp32", scr_ptr="*fp32", part_ptr="*fp32", amax_ptr="*fp32", a_ptr="*fp32")  # a: partials
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "*i16" if n.endswith("_ptr") else
                                                      "fp32" if n in ("eps", "inv_qmax") else "i32")
           for n in st._prologue_kernel.arg_names}
    ptx = triton.compile(ASTSource(fn=st._prologue_kernel, signature=sig, constexprs=consts),
                         target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": consts["NW"], "enable_fp_fusion": False}).asm["ptx"]
    assert "div.rn.f32" in ptx and "sqrt.rn.f32" in ptx, "expected IEEE div/sqrt"
    found |= set(re.findall(r"\\bfma\\.\\w+|\\.ftz\\b|div\\.(?:full|approx)|sqrt\\.approx|ex2\\.|rsqrt", ptx))
print(sorted(found))
"""


def test_sm90_codegen_is_exact_ieee():
    """Compile the prologue kernel for an H100/H200 target (no GPU needed; a subprocess, since this one
    interprets Triton): the PTX must hold no fused multiply-add, no flush-to-zero and no approximate
    div/sqrt/exp — the bit-exactness premises. The variant (gated RMSNorm producer on split partials, e4m3 group
    quant, hardware convert) uses every such operation; compiled as the default config and with the group's
    constants read before the programmatic wait (``bm1w1e``, ``bm1w1p``)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _CODEGEN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


def _rn32(x: Fraction) -> Fraction:
    """x rounded to the nearest binary32 value, ties to even (subnormals included, no overflow)."""
    if x == 0:
        return Fraction(0)
    m = abs(x)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    e = max(e - (Fraction(2) ** e > m), -126)
    n, rem = divmod(m * 2 ** (23 - e), 1)
    n = int(n) + (rem > Fraction(1, 2) or (rem == Fraction(1, 2) and int(n) & 1))
    return (1 if x > 0 else -1) * n * Fraction(2) ** (e - 23)


def _markstein_misses(lo: int, hi: int, n: int, seed: int) -> tuple[int, int]:
    """(quotients >= 2^-11 where the FAST quotient of :func:`rq_triton._quotient` differs from RN(v / scale), those
    below 2^-11 off by more than an ulp of 2^-11) over n random binary32 pairs: scale in [2^lo, 2^hi), |v| <=
    448.0001 scale (finite), the quotient's magnitude log-spread down to 2^-160. Exact rational arithmetic (an FMA
    rounds once)."""
    import numpy as np

    gen = np.random.default_rng(seed)
    scale = (gen.uniform(1, 2, n) * 2.0 ** gen.integers(lo, hi, n)).astype(np.float32)
    mag = np.where(gen.random(n) < 0.5, gen.uniform(0, 448.0001, n), 2.0 ** gen.uniform(-160, 9, n))
    with np.errstate(over="ignore"):
        v = (np.sign(gen.random(n) - 0.5) * mag * scale).astype(np.float32)
    keep = np.isfinite(v)
    big = small = 0
    for a, b in zip(map(Fraction, v[keep].tolist()), map(Fraction, scale[keep].tolist()), strict=True):
        r = _rn32(1 / b)
        q0 = _rn32(a * r)
        q = _rn32(q0 + _rn32(a - q0 * b) * r)
        want = _rn32(a / b)
        if abs(want) >= Fraction(2) ** -11:
            big += q != want
        else:
            small += abs(q - want) > Fraction(2) ** -34
    return big, small


def test_markstein_quotient_is_div_rn_above_the_scale_floor():
    """The FAST quotient's claim, in exact arithmetic: with every scale in the window it takes ([2^-90, 2^126]) the
    quotient equals IEEE division wherever the code can depend on it (|q| >= 2^-11) and stays within an ulp below;
    under 2^-100 it misses — the floor is needed."""
    lo = int(torch.tensor(rq_triton._FAST_MIN_SCALE.value).log2())
    hi = int(torch.tensor(rq_triton._FAST_MAX_SCALE.value).log2())
    assert (lo, hi) == (-90, 126)
    assert _markstein_misses(lo, hi, 4000, seed=1) == (0, 0)
    assert _markstein_misses(-126, -100, 4000, seed=2)[0] > 0


GLUON = sorted(rq_gluon.CONFIGS)


def test_gluon_configs_refuse_the_interpreter():
    """A Gluon config named where Gluon cannot run raises, naming it — never the Triton kernel in its place."""
    if GPU:
        pytest.skip("this machine has a GPU")
    x = torch.zeros(64, 128, dtype=torch.bfloat16)
    with pytest.raises(BackendUnavailableError, match="rotate_quant cfg 'gl128w16' is the Gluon prefill kernel"):
        rq_triton.rotate_quant(x, *random_rotations(1, 128), "e4m3", "group", cfg="gl128w16")


def test_default_config_takes_gluon_from_min_m_where_measured(monkeypatch):
    """Per-group scales from MIN_M on the GPUs it was measured on; per-token scales and other devices stay Triton."""
    monkeypatch.setattr(rq_gluon, "measured_on", lambda device: True)
    for M, want in ((rq_gluon.MIN_M - 1, st.DEFAULT), (rq_gluon.MIN_M, rq_gluon.DEFAULT), (1, st.SMALL_M_DEFAULT)):
        assert rq_triton.default_config(torch.empty(M, 128), "group") == want, M
    assert rq_triton.default_config(torch.empty(rq_gluon.MIN_M, 128), "token") == st.DEFAULT
    monkeypatch.setattr(rq_gluon, "measured_on", lambda device: False)
    assert rq_triton.default_config(torch.empty(rq_gluon.MIN_M, 128), "group") == st.DEFAULT


@pytest.mark.skipif(not GPU, reason="Gluon kernels run on GPUs only")
@pytest.mark.parametrize("cfg", GLUON)
def test_gluon_configs_equal_reference_bytewise_gpu(cfg):
    """Every Gluon config against the reference, byte for byte: M = 37 and 300 leave partial row blocks at every
    BR, the mixed rows (zeros, subnormal inputs, an outlier, underflowing scales) take the FAST quotient's div.rn
    branch in their tile while the other tiles take Markstein's; fp16 / fp32 inputs, strided rows."""
    for dtype, P, M, K in ((torch.bfloat16, 3, 37, 256), (torch.bfloat16, 2, 300, 640), (torch.float16, 1, 200, 384),
                           (torch.float32, 2, 130, 256)):
        big = activations(M, 2 * K, dtype, seed=M + K, device="cuda")
        x = big[:, :K]
        recs = random_rotations(P, K, seed=K + P, device="cuda")
        for elem, granularity in VARIANTS:
            want = reference.rotate_quant(x, *recs, elem, granularity)
            for hw in (False, True) if elem == "e4m3" else (False,):
                got = rq_triton.rotate_quant(x, *recs, elem, granularity, hw=hw, cfg=cfg,
                                             out=poisoned(P, M, K, elem, granularity, "cuda"))
                assert_same(got, want)


GLUON_SM90 = """
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from radiance_kernels.ops.rotate_quant import gluon as rg
out = []
k = rg._rotate_quant_kernel
for cfg, elem, pass_ in (("gl128w16c", 0, 0), ("gl128w16c", 1, 0), ("gl128w16", 0, 1), ("gl128w16c_div", 0, 2)):
    c = rg.CONFIGS[cfg]
    ce = dict(DT=2, NL=8, ELEM=elem, HW=True, PASS=pass_, RPT=c["RPT"], NW=c["num_warps"], FAST=c["fast"],
              CHUNKED=c["chunked"])
    types = {"x_ptr": "*i16", "mate_ptr": "*i32", "cs_ptr": "*fp16", "q_ptr": "*i8" if elem else "*u8",
             "inv_qmax": "fp32"}
    sig = {n: "constexpr" if n in ce else types.get(n, "*fp32" if n.endswith("_ptr") else "i32") for n in k.arg_names}
    ptx = triton.compile(GluonASTSource(fn=k, signature=sig, constexprs=ce), target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": c["num_warps"], "enable_fp_fusion": False}).asm["ptx"]
    out.append(dict(cfg=cfg, elem=elem, pass_=pass_, fast=c["fast"], shfl_idx="shfl.sync.idx" in ptx,
                    ld4=len(re.findall(r"ld\\.shared\\.v4\\.b32", ptx)),
                    st4=len(re.findall(r"st\\.shared\\.v4\\.b32", ptx)),
                    fma=len(re.findall(r"\\bfma\\.rn\\.f32", ptx)), div="div.rn.f32" in ptx,
                    approx=sorted(set(re.findall(r"\\.ftz\\b|div\\.(?:full|approx)|rcp\\.approx", ptx)))))
print(json.dumps(out))
"""


def test_gluon_compiles_for_sm90():
    """The Gluon kernel compiles for sm_90 with this environment's Triton (the H200 runs 3.6): the Givens layers'
    lookups go through shared memory as 16-byte vectors at RPT 4 (8 layers x 8 channels per thread, each way; no
    index shuffle), no flush-to-zero or approximate division anywhere; FMAs only in the FAST quotient (the rotation
    stays mul / mul / add), IEEE division kept for its fallback and the reciprocal, none in pass 1."""
    for r in compiled_for_sm90(GLUON_SM90):
        assert not r["shfl_idx"] and r["ld4"] >= 64 and r["st4"] >= 64 and r["approx"] == [], r
        assert r["div"] == (r["pass_"] != 1), r
        assert (r["fma"] > 0) == (r["fast"] and r["pass_"] != 1), r


FULL_M = (1, 5, 8, 16, 40, 64, 128, 1024, 2048, 8192)


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a GPU")
@pytest.mark.parametrize("K", (5120, 17408))
@pytest.mark.parametrize("M", FULL_M)
def test_full_shapes_bytewise_gpu(K, M):
    """The default config for M (from the Gluon kernel's MIN_M on the H200) and, at prefill M, every Gluon config."""
    x = activations(M, K, torch.bfloat16, seed=M, device="cuda")
    for P in (1, 2, 3):
        recs = random_rotations(P, K, seed=P, device="cuda")
        xr = reference.rotate_all(x, *recs)
        for elem, granularity in VARIANTS:
            want = reference.quantize(xr, elem, granularity)
            for hw in (False, True) if elem == "e4m3" else (False,):
                for cfg in [None] + (GLUON if M >= 1024 else []):
                    got = rq_triton.rotate_quant(x, *recs, elem, granularity, hw=hw, cfg=cfg,
                                                 out=poisoned(P, M, K, elem, granularity, "cuda"))
                    assert_same(got, want)
            del want, got
        del xr


def test_e4m3_x512_equals_decode_over_every_code(device):
    """The row sums' integer form of an e4m3 code equals the decoded value × 512 for every code the
    encoder emits (all but the NaNs)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _k(c_ptr, o_ptr):
        offs = tl.arange(0, 256)
        tl.store(o_ptr + offs, rq_triton._e4m3_x512(tl.load(c_ptr + offs)))

    codes = torch.arange(256, dtype=torch.int32, device=device)
    got = torch.empty(256, dtype=torch.int32, device=device)
    _k[(1,)](codes, got)
    codes, got = codes.cpu(), got.cpu()
    live = (codes & 0x7F) != 0x7F
    want = (e4m3.decode(codes.to(torch.uint8)).float() * 512).to(torch.int32)
    assert torch.equal(got[live], want[live])
