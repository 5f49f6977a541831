"""Projection shapes of the Qwen3.8-27B-class target (the ParoQuant / MXFP4 serving log's model).

Each :class:`Proj` is one fused linear as the GEMM sees it: ``K`` input channels, output partitions
``parts`` (widths that sum to ``N``; ``P = len(parts)`` distinct rotations), per rank at tensor
parallel degree ``tp``. ``count`` is how many such linears one forward runs.

Where the numbers come from (the seeds' engineering log, 001_fa4066f510379ace):
- stated: hidden 5120 (K=5120 everywhere), MLP intermediate 17408 ("gate_up N=17408 K=5120" is the
  per-rank gate_up at TP=2), down K=8704 per rank (G=68 at TP=2, K=8704 benches), 64 layers, 48 GDN +
  16 attention ("64 + 48 + 16 sites"), GDN gates ``in_proj_ba`` N=48 per rank (N=96 at TP=1) and
  48 GDN layers; o_proj K=3072 per rank ("o_proj producer N=3072"); K=6144 named among the K's;
  merged linears: attention qkv P=3, gate_up P=2, GDN in_proj P=2 (q/k/v share one rotation, z another);
  GDN gated norm is per head with head = 128-group (value head dim 128).
- inferred (Qwen3.5-27B-class config, consistent with the above): attention 24 query heads x 256
  with the output gate folded into q_proj (q_proj N = 2*24*256 = 12288), 4 KV heads x 256
  (k, v N = 1024 each), o_proj K = 24*256 = 6144; GDN 16 key heads x 128 (q, k N = 2048 each),
  48 value heads x 128 (v, z N = 6144 each; out_proj K = 6144); in_proj_ba = b and a, 48 heads each.
- TP=2 splits every N (column-parallel) or K (row-parallel: o_proj, down, out_proj) in half; the
  KV heads (4) split 2 per rank.
- ``gdn.in_proj_ba`` is bf16 in the PARO checkpoint (unquantised); it is listed because the MXFP4
  requant path quantises it (one partition: no rotation).
"""

from __future__ import annotations

from dataclasses import dataclass

HIDDEN = 5120
INTERMEDIATE = 17408
LAYERS = 64
GDN_LAYERS = 48
ATTN_LAYERS = 16
ATTN_Q_HEADS, ATTN_KV_HEADS, ATTN_HEAD_DIM = 24, 4, 256  # inferred
GDN_K_HEADS, GDN_V_HEADS, GDN_HEAD_DIM = 16, 48, 128  # v heads from in_proj_ba; k heads inferred


@dataclass(frozen=True)
class Proj:
    name: str
    K: int
    parts: tuple[int, ...]
    count: int
    tp: int

    @property
    def N(self) -> int:
        return sum(self.parts)

    @property
    def P(self) -> int:
        return len(self.parts)

    @property
    def bounds(self) -> tuple[int, ...]:
        """Partition boundaries [P + 1] in output columns."""
        out = [0]
        for p in self.parts:
            out.append(out[-1] + p)
        return tuple(out)


def projections(tp: int = 1) -> tuple[Proj, ...]:
    """The quantised projections per rank at tensor-parallel degree ``tp`` (1 or 2)."""
    if tp not in (1, 2):
        raise ValueError(f"projections: tp must be 1 or 2, got {tp}")
    q = 2 * ATTN_Q_HEADS * ATTN_HEAD_DIM // tp  # query + output gate
    kv = ATTN_KV_HEADS * ATTN_HEAD_DIM // tp
    gk = GDN_K_HEADS * GDN_HEAD_DIM // tp
    gv = GDN_V_HEADS * GDN_HEAD_DIM // tp
    inter = INTERMEDIATE // tp
    return (
        Proj("attn.qkv", HIDDEN, (q, kv, kv), ATTN_LAYERS, tp),
        Proj("attn.o_proj", ATTN_Q_HEADS * ATTN_HEAD_DIM // tp, (HIDDEN,), ATTN_LAYERS, tp),
        Proj("mlp.gate_up", HIDDEN, (inter, inter), LAYERS, tp),
        Proj("mlp.down", inter, (HIDDEN,), LAYERS, tp),
        Proj("gdn.in_proj_qkvz", HIDDEN, (2 * gk + gv, gv), GDN_LAYERS, tp),
        Proj("gdn.out_proj", gv, (HIDDEN,), GDN_LAYERS, tp),
        Proj("gdn.in_proj_ba", HIDDEN, (2 * GDN_V_HEADS // tp,), GDN_LAYERS, tp),
    )


def all_projections() -> tuple[Proj, ...]:
    """TP=1 and the per-rank TP=2 shapes."""
    return projections(1) + projections(2)
