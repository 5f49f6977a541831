import pytest
import torch
import torch.nn.functional as F
from conftest import FULL_SHAPES, compiled_for_sm90
from test_rotate_quant import VARIANTS, activations, assert_same, poisoned

from radiance_kernels.formats.rotation import random_rotations
from radiance_kernels.ops.stream import reference
from radiance_kernels.ops.stream import triton as st

# launch names; "_k" = gated_rms_norm with a [K] weight instead of the shared [128] one
PRODUCERS = ("add_rms", "add_rms_gemma", "silu_mul", "sigmoid_gate", "gated_rms_norm", "gated_rms_norm_k")
EPS = 1e-6
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # exp → inf


def inputs(name: str, M: int, K: int, dtype, seed: int, device):
    a = activations(M, K, dtype, seed=seed, device=device)
    b = activations(M, K, dtype, seed=seed + 1, device=device).flip(0)  # zero/subnormal rows land elsewhere
    gen = torch.Generator().manual_seed(seed)
    wk = 128 if name == "gated_rms_norm" else K
    w = (torch.randn(wk, generator=gen) * 0.3 + (0 if name == "add_rms_gemma" else 1)).to(dtype).to(device)
    return a, b, (None if name in ("silu_mul", "sigmoid_gate") else w)


def plain_reference(name, a, b, w):
    if name.startswith("add_rms"):
        return reference.add_rms_norm(a, b, w, EPS, gemma=name == "add_rms_gemma")
    return (reference.gated(name.removesuffix("_k"), a, b, w, EPS),)


def launch(name, a, b, w, **kw):
    return st.launch(name.removesuffix("_k"), a, b, w, EPS, **kw)


def poisoned_hs(name, M, K, dtype, device):
    out = {"hs": torch.full((M, K), float("nan"), dtype=dtype, device=device)}
    if name.startswith("add_rms"):
        out["residual"] = torch.full((M, K), float("nan"), dtype=dtype, device=device)
    return out


def check_family(name, M, K, P, dtype, device, variants, hw=False, cfg=st.DEFAULT, **kw):
    """Plain kernel == plain reference; fused kernel == reference chain (producer → rotate_quant).
    Returns the fused outputs by variant (``kw``: further launch arguments, e.g. ``split``)."""
    a, b, w = inputs(name, M, K, dtype, seed=M + K, device=device)
    plain = plain_reference(name, a, b, w)
    got = launch(name, a, b, w, store_hs=True, out=poisoned_hs(name, M, K, dtype, device), cfg=cfg, **kw)
    for want, key in zip(plain, ("hs", "residual")[:len(plain)], strict=True):
        assert torch.equal(got[key].view(torch.int16 if dtype != torch.float32 else torch.int32),
                           want.view(torch.int16 if dtype != torch.float32 else torch.int32)), key
    recs = random_rotations(P, K, seed=P, device=device)
    norm = name.startswith("add_rms")
    fused = {}
    for elem, granularity in variants:
        want = reference.rotate_quant(plain[0], *recs, elem, granularity)
        out = poisoned(P, M, K, elem, granularity, device)
        if norm:
            out.update(poisoned_hs(name, M, K, dtype, device))
        got = launch(name, a, b, w, rotation=recs, elem=elem, granularity=granularity, store_hs=norm, hw=hw, out=out,
                     cfg=cfg, **kw)
        assert_same(got, want)
        if norm:
            assert torch.equal(got["hs"], plain[0]) and torch.equal(got["residual"], plain[1])
        fused[elem, granularity] = got
    return fused


CASES = [(torch.bfloat16, 2, 5, 256, VARIANTS), (torch.float16, 3, 16, 384, VARIANTS[::3]),
         (torch.float32, 1, 3, 128, VARIANTS[::3]), (torch.bfloat16, 1, 20, 128, VARIANTS[1:3])]


@pytest.mark.parametrize("name", PRODUCERS)
@pytest.mark.parametrize("dtype, P, M, K, variants", CASES)
def test_fused_equals_chain_bytewise(device, name, dtype, P, M, K, variants):
    check_family(name, M, K, P, dtype, device, variants)


@pytest.mark.parametrize("cfg", ("bm16w4_recompute", "bm4w4", "bm1w1", "bm1w1e", "bm32w8"))
@pytest.mark.parametrize("name", ("add_rms_gemma", "gated_rms_norm"))
def test_fused_configs_equal_chain_bytewise(device, name, cfg):
    """Non-default launch configs with the producers (per-token scratch or recompute, stored hs/residual,
    partial row blocks)."""
    check_family(name, 37, 256, 2, torch.bfloat16, device, VARIANTS[::3], cfg=cfg)


def test_fused_token_scratch_row_chunks(device, monkeypatch):
    """Per-token scratch launches over row chunks (cap of 8 rows) with a producer storing hs / residual."""
    monkeypatch.setattr(st, "SCRATCH_BYTES", 2 * 256 * 4 * 8)
    check_family("add_rms", 37, 256, 2, torch.bfloat16, device, [("e4m3", "token")], cfg="bm4w4")


@pytest.mark.parametrize("name, dtype, P, M, K, cfg", [("add_rms", torch.bfloat16, 3, 8, 640, st.DEFAULT),
                                                        ("add_rms_gemma", torch.float16, 2, 37, 384, "bm4w4"),
                                                        ("add_rms", torch.bfloat16, 2, 9, 256, "bm1w1"),
                                                        ("add_rms_gemma", torch.bfloat16, 3, 8, 384, "bm1w1e")])
def test_add_rms_split_equals_row_wide_bytewise(device, name, dtype, P, M, K, cfg):
    """Split add+RMSNorm (parallel [M, G] sum-of-squares partials folded in group order, one group per
    program) and the row-wide walk both equal the reference chain, and each other, byte for byte."""
    split = check_family(name, M, K, P, dtype, device, VARIANTS, cfg=cfg, split=True)
    walk = check_family(name, M, K, P, dtype, device, VARIANTS, cfg=cfg, split=False)
    for key, got in split.items():
        for t in ("A", "AS", "RS", "hs", "residual"):
            assert torch.equal(got[t].view(torch.uint8), walk[key][t].view(torch.uint8)), (key, t)


@pytest.mark.parametrize("name", PRODUCERS)
def test_early_constants_same_bytes(device, name, monkeypatch):
    """``bm1w1e`` loads a one-group program's constants (weight, channel scales, Givens tables) before its wait:
    taken by the plain and per-group launches of every producer (not per-token: a program walks every group there),
    each output byte-identical to ``bm1w1``'s."""
    early, real = [], st._prologue_kernel

    class Spy:
        def __getitem__(self, grid):
            return lambda *args, **kw: (early.append(kw["EARLY"]), real[grid](*args, **kw))[1]

    monkeypatch.setattr(st, "_prologue_kernel", Spy())
    M, K, P = 5, 256, 2
    a, b, w = inputs(name, M, K, torch.bfloat16, seed=3, device=device)
    recs = random_rotations(P, K, seed=5, device=device)
    for kw in (dict(), *(dict(rotation=recs, elem=e, granularity=g) for e, g in VARIANTS)):
        got = {cfg: launch(name, a, b, w, store_hs=True, cfg=cfg, **kw) for cfg in ("bm1w1", "bm1w1e")}
        for key, t in got["bm1w1"].items():
            assert torch.equal(t.view(torch.uint8), got["bm1w1e"][key].view(torch.uint8)), (kw.get("elem"), key)
        assert early[-1] == (kw.get("granularity") != "token") and not early[-2], kw
    assert sum(early) == 1 + sum(g != "token" for _, g in VARIANTS)


EARLY_SM90 = """
import json, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from radiance_kernels.ops.stream.triton import _prologue_kernel as k
types = dict(a_ptr="*i16", b_ptr="*i16", w_ptr="*i16", hs_ptr="*i16", res_ptr="*i16", mate_ptr="*i32",
             cs_ptr="*fp16", q_ptr="*u8", eps="fp32", inv_qmax="fp32")
out = []
for producer in (1, 3, 5):
    for early in (0, 1, 2):
        ce = dict(PRODUCER=producer, GEMMA=True, DT=2, QUANT=True, ELEM=0, TOKEN=False, STORE_HS=producer == 1,
                  NL=8, HW=True, BM=1, SCRATCH=True, NW=1, FOLD=40 if producer == 1 else 0, TSPLIT=0, WAIT=True,
                  XA=2 if producer == 1 else 0, XB=0, EARLY=early)
        sig = {n: "constexpr" if n in ce else types.get(n, "*fp32" if n.endswith("_ptr") else "i32")
               for n in k.arg_names}
        ptx = triton.compile(ASTSource(fn=k, signature=sig, constexprs=ce), target=GPUTarget("cuda", 90, 32),
                             options={"num_warps": 1, "enable_fp_fusion": False}).asm["ptx"]
        head, wait, tail = ptx.partition("griddepcontrol.wait")
        out.append(dict(producer=producer, early=early, wait=bool(wait), ld_before=head.count("ld.global"),
                        prefetch_before=head.count("prefetch.global.L2"), prefetch_after=tail.count("prefetch"),
                        ld_after=tail.count("ld.global")))
print(json.dumps(out))
"""


def test_early_constants_compile_for_sm90():
    """sm_90 (this environment's Triton; the H200 runs 3.6): a one-warp decode producer reads nothing before its
    programmatic wait, or (EARLY 1) its weight row and group tables — 8 layers x (partner, cos, sin) + channel
    scales, 4 values a lane each — loaded, or (EARLY 2) the same addresses prefetched to the L2 and nothing loaded;
    what EARLY 1 moved before the wait is what the others load after it."""
    rows = {(r["producer"], r["early"]): r for r in compiled_for_sm90(EARLY_SM90)}
    for producer in (1, 3, 5):
        late, regs, l2 = (rows[producer, e] for e in (0, 1, 2))
        assert all(r["wait"] for r in (late, regs, l2))
        assert late["ld_before"] == late["prefetch_before"] == 0, late
        weight = 4 * (producer != 3)
        assert regs["ld_before"] == 25 * 4 + weight and regs["prefetch_before"] == 0, regs
        assert regs["ld_before"] + regs["ld_after"] == late["ld_after"], (regs, late)
        assert l2["ld_before"] == 0 and l2["prefetch_before"] == regs["ld_before"] and not l2["prefetch_after"], l2
        assert l2["ld_after"] == late["ld_after"], (l2, late)


@pytest.mark.parametrize("name, dtype", [("silu_mul", torch.bfloat16), ("gated_rms_norm_k", torch.float16)])
def test_token_split_equals_walk_bytewise(device, name, dtype):
    """Per-token split in two launches (per-group amax partials, folded) and the row-wide walk both equal the
    reference chain byte for byte."""
    M, K, P = 8, 384, 3
    a, b, w = inputs(name, M, K, dtype, seed=11, device=device)
    recs = random_rotations(P, K, seed=P, device=device)
    for elem in ("e4m3", "int8"):
        want = reference.rotate_quant(plain_reference(name, a, b, w)[0], *recs, elem, "token")
        for split in (True, False):
            assert_same(launch(name, a, b, w, rotation=recs, elem=elem, granularity="token",
                               out=poisoned(P, M, K, elem, "token", device), split=split), want)


def test_add_rms_split_choice(device, monkeypatch):
    """``split=None`` splits while the row-wide grid (P x row blocks) is below SPLIT_PROGRAMS; a split for a
    producer without a row sum of squares raises."""
    a, b, w = inputs("add_rms", 8, 256, torch.bfloat16, 3, device)
    grids, real = [], st._ss_partials_kernel

    class Spy:
        def __getitem__(self, grid):
            grids.append(grid)
            return real[grid]

    monkeypatch.setattr(st, "_ss_partials_kernel", Spy())
    outs = []
    for programs in (1, 2):  # the row-wide grid here is one program (8 rows, BM 16)
        monkeypatch.setattr(st, "SPLIT_PROGRAMS", programs)
        outs.append(launch("add_rms", a, b, w, store_hs=True, cfg=st.DEFAULT))
    assert grids == [(1, 2)]
    assert all(torch.equal(outs[0][k], outs[1][k]) for k in ("hs", "residual"))
    with pytest.raises(ValueError, match="split=True applies to add_rms"):
        launch("silu_mul", a, b, None, store_hs=True, split=True)


@pytest.mark.parametrize("name, S, M, split", [("add_rms_gemma", 3, 5, True), ("add_rms_gemma", 1, 9, False),
                                                ("silu_mul", 2, 5, None), ("gated_rms_norm", 4, 3, None)])
def test_split_partials_inputs_bytewise(device, name, S, M, split):
    """x (and gate) as a split-K GEMM's fp32 partials [S, M, K] — gate_up's two halves as strided slices of one —
    give the outputs of the same launch on their in-order sum rounded to bf16 (:func:`reference.activation`), byte
    for byte, plain and fused; the reference ops read them the same way."""
    K, P = 256, 2
    _, b, w = inputs(name, M, K, torch.bfloat16, seed=S + M, device=device)
    gen = torch.Generator().manual_seed(S)
    parts = (torch.randn(S, M, 2 * K, generator=gen) * 3).to(device)  # gate_up's partials: [gate | up]
    x = parts[:, :, K:]
    gate = parts[:, :, :K] if name == "silu_mul" else b  # add_rms: b is the bf16 residual
    x_act, gate_act = reference.activation(x), reference.activation(gate)
    assert x_act.dtype == torch.bfloat16 and torch.equal(
        x_act, sum((p for p in x), torch.zeros(M, K, device=device)).to(torch.bfloat16))
    recs = random_rotations(P, K, seed=P, device=device)
    for kw in (dict(store_hs=True), dict(rotation=recs, elem="e4m3", granularity="group", store_hs=True)):
        if split is not None:
            kw["split"] = split
        got, want = launch(name, x, gate, w, **kw), launch(name, x_act, gate_act, w, **kw)
        assert got.keys() == want.keys()
        for key in got:
            assert torch.equal(got[key].view(torch.uint8), want[key].view(torch.uint8)), key
    if name.startswith("add_rms"):
        ref_got = reference.add_rms_norm(x, gate, w, EPS, gemma=True)
        ref_want = reference.add_rms_norm(x_act, gate_act, w, EPS, gemma=True)
    else:
        ref_got = (reference.gated(name, x, gate, w, EPS),)
        ref_want = (reference.gated(name, x_act, gate_act, w, EPS),)
    assert all(torch.equal(u, v) for u, v in zip(ref_got, ref_want, strict=True))


def test_split_partials_checked(device):
    """Partials are fp32 [S, M, K] standing for bf16 activations: another dtype, or a residual that is not bf16
    [M, K], is named; the ops take them on both backends, fused with rotate+quant too."""
    parts = torch.randn(2, 4, 256, device=device)
    res, w = torch.randn(4, 256, device=device).to(torch.bfloat16), torch.ones(256, device=device).bfloat16()
    with pytest.raises(ValueError, match="split partials"):
        torch.ops.radiance.add_rms_norm(parts.half(), res, w, EPS, False, "reference")
    with pytest.raises(ValueError, match="residual must match torch.bfloat16"):
        torch.ops.radiance.add_rms_norm(parts, res.float(), w, EPS, False, "triton")
    hs, r = torch.ops.radiance.add_rms_norm(parts, res, w, EPS, False, "triton")
    assert hs.shape == r.shape == (4, 256) and hs.dtype == torch.bfloat16
    recs = random_rotations(2, 256, seed=2, device=device)  # the fused ops on partials, both backends
    outs = [torch.ops.radiance.add_rms_norm_rotate_quant(parts, res, w, EPS, True, *recs, "e4m3", "group", be)
            for be in ("reference", "triton")]
    outs += [torch.ops.radiance.gated_rotate_quant("silu_mul", parts, parts[:1], None, 0.0, *recs, "int8", "group",
                                                   be) for be in ("reference", "triton")]
    for u, v in [*zip(*outs[:2], strict=True), *zip(*outs[2:], strict=True)]:
        assert torch.equal(u, v)


def test_ops_dispatch_and_outputs(device):
    M, K, P = 4, 256, 2
    a, b, w = inputs("add_rms_gemma", M, K, torch.bfloat16, 7, device)
    recs = random_rotations(P, K, seed=5, device=device)
    outs = [torch.ops.radiance.add_rms_norm_rotate_quant(a, b, w, EPS, True, *recs, "e4m3", "group", be)
            for be in ("reference", "triton")]
    for u, v in zip(*outs, strict=True):
        assert torch.equal(u, v)
    g_u = torch.cat([b, a], dim=1)  # vLLM's gate_up layout: strided halves
    outs = [torch.ops.radiance.gated("silu_mul", g_u[:, K:], g_u[:, :K], None, 0.0, be)
            for be in ("reference", "triton")]
    assert torch.equal(*outs)
    with pytest.raises(ValueError, match="takes no weight"):
        torch.ops.radiance.gated("sigmoid_gate", a, b, w, 0.0, "reference")
    with pytest.raises(ValueError, match="weight must be a contiguous 1-D"):
        torch.ops.radiance.add_rms_norm(a, b, w.float(), EPS, False, "triton")
    with pytest.raises(ValueError, match="kind must be one of"):
        torch.ops.radiance.gated("gelu", a, b, None, 0.0, "reference")


def test_producers_follow_vllm_semantics():
    """The radiance producers (own exp, tree sums) against the torch formulas vLLM uses: residual exact,
    outputs within one bf16 ulp and nearly always equal."""
    M, K = 16, 512
    x, r = torch.randn(M, K).to(torch.bfloat16), torch.randn(M, K).to(torch.bfloat16)
    w = (torch.randn(K) * 0.3 + 1).to(torch.bfloat16)

    def close(got, want, frac):
        diff = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
        assert diff.max() <= 1 and (diff == 0).float().mean() >= frac

    for gemma in (False, True):
        hs, res = reference.add_rms_norm(x, r, w, EPS, gemma)
        s = (x.float() + r.float()).to(torch.bfloat16)
        assert torch.equal(res, s)
        n = s.float() * torch.rsqrt(s.float().pow(2).mean(-1, keepdim=True) + EPS)
        close(hs, (n * (w.float() + 1.0)).to(torch.bfloat16) if gemma else n.to(torch.bfloat16) * w, 0.99)
    g, u = torch.randn(M, K).to(torch.bfloat16) * 4, torch.randn(M, K).to(torch.bfloat16)
    close(reference.gated("silu_mul", u, g, None, 0.0), F.silu(g) * u, 0.999)
    close(reference.gated("sigmoid_gate", u, g, None, 0.0), u * torch.sigmoid(g), 0.999)
    wh = w[:128].contiguous()
    h = u.float().reshape(M, -1, 128)
    n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * wh.float()
    want = (n.reshape(M, K) * F.silu(g.float())).to(torch.bfloat16)
    close(reference.gated("gated_rms_norm", u, g, wh, EPS), want, 0.99)


class _Block(torch.nn.Module):
    def __init__(self, K, backend, device):
        super().__init__()
        self.recs = random_rotations(2, K, seed=1, device=device)
        self.w = (torch.ones(K, device=device) * 0.1).to(torch.bfloat16)
        self.backend = backend

    def forward(self, x, residual):
        hs, residual, A, AS, RS = torch.ops.radiance.add_rms_norm_rotate_quant(
            x, residual, self.w, EPS, True, *self.recs, "e4m3", "group", self.backend)
        A2, AS2, _ = torch.ops.radiance.rotate_quant(hs, *self.recs, "int8", "token", self.backend)
        _, AS3, RS3 = torch.ops.radiance.gated_rotate_quant("silu_mul", hs, x, None, 0.0, *self.recs,
                                                            "e4m3", "token", self.backend)
        return (residual, A.float().sum() + AS.sum() + RS.sum(), A2.float() * AS2[..., None], RS3 + AS3[..., None],
                torch.ops.radiance.gated("sigmoid_gate", hs, x, None, 0.0, self.backend))


@pytest.mark.parametrize("backend", ("reference", "triton"))
def test_torch_compile_fullgraph(backend, device):
    torch._dynamo.reset()
    K = 256
    x, r = (torch.randn(3, K, device=device).to(torch.bfloat16) for _ in range(2))
    m = _Block(K, backend, device)
    eager = m(x, r)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")(x, r)
    for u, v in zip(eager, compiled, strict=True):
        assert torch.equal(u, v)


FULL_VARIANT = {"add_rms": ("e4m3", "group"), "add_rms_gemma": ("e4m3", "token"), "silu_mul": ("int8", "token"),
                "sigmoid_gate": ("int8", "group"), "gated_rms_norm": ("e4m3", "group"),
                "gated_rms_norm_k": ("e4m3", "group")}


@pytest.mark.skipif(not FULL_SHAPES, reason="RADIANCE_FULL_SHAPES=1 on a GPU")
@pytest.mark.parametrize("K", (5120, 17408))
@pytest.mark.parametrize("M", (1, 5, 8, 16, 40, 64, 128, 1024, 2048, 8192))
def test_full_shapes_fused_equals_chain_gpu(K, M):
    for i, name in enumerate(PRODUCERS):  # one quant variant per family keeps the compile count small
        check_family(name, M, K, 1 + (M + i) % 3, torch.bfloat16, "cuda", [FULL_VARIANT[name]], hw=True)
