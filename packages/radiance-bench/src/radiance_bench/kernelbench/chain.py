"""The 64-layer decode stack in model order, each linear's input made from the layer before it.

Layer ``i`` is attention when ``i % 4 == 3`` (16 of 64), else Gated DeltaNet (48), as the 27B-class target
interleaves them. Per layer, with the residual stream carried through::

    GDN:        add+RMSNorm(prev out) → in_proj_qkvz ; hs → in_proj_ba (skinny, bf16)
                gated RMSNorm(core out, z) → out_proj → o
    attention:  add+RMSNorm(prev out) → qkv         ; sigmoid gate(core out, gate) → o_proj → o
    MLP:        add+RMSNorm(o) → gate_up → silu·mul → down → next layer's prev out

The attention / GDN cores are not ours (their outputs are fresh inputs here, as in the unchained stack); every
producer is the served fused one (producer + rotate+quant, e4m3 or int8 per-group; in vLLM since session 16 the
attention output gate too, and in_proj_ba on the skinny GEMM) and every projection the W4A8 GEMM. ``defer``: the
GEMMs whose output our next producer reads (o_proj / out_proj, gate_up, down) leave their split partials for it to
sum (``w4a8_gemm_partials``) — no arrival count or last-program reduction on their tail; qkv and in_proj_qkvz feed
the cores and reduce in the kernel. Each form runs the tile configs the GPU's table picks for it (the partials form:
its ``defer`` entries, tuned with the producer); on the same configs both forms give the same bits
(``deferred_configs`` runs the reduced form on the deferred picks; checked by :func:`same_outputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radiance_bench.kernelbench.cases import activations, w4_weight, w4a8_gemm
from radiance_bench.kernelbench.timeline import Role
from radiance_kernels.formats.rotation import GROUP
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm import tuned
from radiance_kernels.shapes import LAYERS, projections

EPS = 1e-6


@dataclass
class Layer:
    attn: bool
    w: dict  # projection name (without its "attn." / "gdn." / "mlp." prefix) → W4Weight
    norms: tuple  # the two add+RMSNorm weights (bf16 [K])
    core: tuple  # the core's output and gate (bf16 [M, K of o_proj / out_proj])
    gnorm: torch.Tensor | None  # GDN: the gated RMSNorm weight (bf16 [128])
    ba: torch.Tensor | None  # GDN: in_proj_ba's bf16 weight [N, K]


def build(M: int, bits: int, projs=None, count: int = LAYERS, device="cuda") -> tuple[list[Layer], int]:
    """``count`` layers' weights and fresh core outputs at decode ``M`` (shapes: ``projs``, default the TP=1
    projections); returns them and the weight bytes."""
    p = {q.name: q for q in projs or projections(1)}
    layers, nbytes = [], 0
    for i in range(count):
        attn = i % 4 == 3
        names = ("attn.qkv", "attn.o_proj") if attn else ("gdn.in_proj_qkvz", "gdn.out_proj")
        w = {n.split(".")[1]: w4_weight(p[n], bits, i, device) for n in (*names, "mlp.gate_up", "mlp.down")}
        o = p[names[1]]
        ba = None if attn else torch.randn(p["gdn.in_proj_ba"].N, o.N, device=device).to(torch.bfloat16)
        layers.append(Layer(attn, w, tuple(activations(1, o.N, 10 * i + j, device)[0] for j in (1, 2)),
                            (activations(M, o.K, 10 * i + 3, device), activations(M, o.K, 10 * i + 4, device)),
                            None if attn else activations(1, GROUP, 10 * i + 5, device)[0], ba))
        nbytes += sum(wt.nbytes for wt in w.values()) + (0 if ba is None else ba.numel() * 2)
    return layers, nbytes


def partials_config(wt, pre) -> dict | None:
    """The tile config the GPU's table picks for ``wt``'s GEMM on ``pre`` in its partials form (None off CUDA: the
    launch's own default)."""
    A = pre[0]
    if not A.is_cuda:
        return None
    name = tuned.pick(torch.cuda.get_device_name(A.device), "w4a8_gemm", "decode", A.shape[1], wt.w.sz.shape[1],
                      A.shape[2], "int8" if A.dtype == torch.int8 else "e4m3", wt.w.bits, True)
    return name and w4.DECODE[name]


def step(layers: list[Layer], M: int, elem: str = "e4m3", defer: bool = False, deferred_configs: bool = False,
         overlap_skinny: bool = False):
    """One decode step over ``layers``: a callable returning the last layer's down output (bf16, or its split
    partials with ``defer``) and the residual stream. ``deferred_configs`` (without ``defer``): the GEMMs the
    deferred step defers reduce in the kernel on the configs it runs them on — its bits. ``overlap_skinny``:
    in_proj_ba's skinny GEMM after in_proj_qkvz's (``after``: it multiplies beside that GEMM, as served)."""
    ops = torch.ops.radiance

    def rot(wt):
        return wt.pairs, wt.theta, wt.cs, elem, "group", "triton"

    def gemm(wt, pre, deferrable):
        if deferrable and defer:
            return ops.w4a8_gemm_partials(*pre, wt.w.wq, wt.w.wh, wt.w.sz, wt.bounds, wt.w.bits, False, "triton")
        if deferrable and deferred_configs:
            return w4.gemm(*pre, wt.w, wt.bounds, False, "decode", cfg=partials_config(wt, pre))
        return w4a8_gemm(wt, *pre, band="decode")

    hidden = layers[0].norms[0].shape[0]
    x0 = activations(M, hidden, 0, layers[0].norms[0].device)

    def run():
        x, res = x0, torch.zeros_like(x0)
        for L in layers:
            first = L.w["qkv" if L.attn else "in_proj_qkvz"]
            hs, res, *pre = ops.add_rms_norm_rotate_quant(x, res, L.norms[0], EPS, True, *rot(first))
            y = gemm(first, pre, False)  # to the core
            if not L.attn:
                ops.skinny_gemm(hs, L.ba, "triton", y if overlap_skinny else None)
            wo = L.w["o_proj" if L.attn else "out_proj"]
            kind, weight = ("sigmoid_gate", None) if L.attn else ("gated_rms_norm", L.gnorm)
            o = gemm(wo, ops.gated_rotate_quant(kind, *L.core, weight, EPS, *rot(wo)), True)
            _, res, *pre = ops.add_rms_norm_rotate_quant(o, res, L.norms[1], EPS, True, *rot(L.w["gate_up"]))
            gu = gemm(L.w["gate_up"], pre, True)
            d = gu.shape[-1] // 2
            x = gemm(L.w["down"], ops.gated_rotate_quant("silu_mul", gu[..., d:], gu[..., :d], None, EPS,
                                                         *rot(L.w["down"])), True)
        return x, res

    return run


def roles(layers: list[Layer]) -> list[Role]:
    """:func:`step`'s launches in order, by role (:mod:`.timeline`): per layer the add+RMSNorm producers (their
    sum-of-squares partials launch first where they split), each W4A8 GEMM, in_proj_ba's skinny GEMM, the gate
    producers, each with the weight bytes it streams."""
    gemm, producer, norm = ("_w4a8_",), ("_prologue",), ("_ss_partials", "_prologue")
    out = []
    for i, L in enumerate(layers):
        first, gate, wo = ("qkv", "sigmoid_gate", "o_proj") if L.attn else ("in_proj_qkvz", "gated_rms_norm",
                                                                           "out_proj")
        out += [Role("add_rms_norm+rq", norm, 0, i), Role(first, gemm, L.w[first].nbytes, i)]
        if L.ba is not None:
            out.append(Role("in_proj_ba", ("_skinny",), L.ba.numel() * L.ba.element_size(), i))
        out += [Role(f"{gate}+rq", producer, 0, i), Role(wo, gemm, L.w[wo].nbytes, i),
                Role("add_rms_norm+rq", norm, 0, i), Role("gate_up", gemm, L.w["gate_up"].nbytes, i),
                Role("silu_mul+rq", producer, 0, i), Role("down", gemm, L.w["down"].nbytes, i)]
    return out


def same_outputs(served, deferred) -> bool:
    """A reduced step's and a deferred one's last outputs and residual streams, bit for bit (the deferred output
    read as its consumer reads it)."""
    from radiance_kernels.ops.stream.reference import activation

    (x, r), (xd, rd) = served, deferred
    return torch.equal(x.view(torch.int16), activation(xd).view(torch.int16)) and \
        torch.equal(r.view(torch.int16), rd.view(torch.int16))
