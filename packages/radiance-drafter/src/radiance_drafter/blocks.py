"""Blocks of the DFlash objective: anchors, query slots, visibility and position weights.

A block at anchor ``a`` (a target position with at least one context position before it) has queries
``[x_a, mask × K]`` at positions ``a .. a+K``; slot ``k >= 1`` predicts ``x_{a+k}`` (ignored past the end
of the sequence). Its queries see the context positions ``t < a`` and every slot of the same block
(non-causal); blocks of one sequence are packed side by side and never see each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

IGNORE = -100


def position_weights(block_size: int) -> torch.Tensor:
    """Loss weight per slot: 0 for the bonus slot, exp(-(k-1)/4) for mask slot k = 1..K."""
    k = torch.arange(block_size, dtype=torch.float32)
    return torch.where(k == 0, torch.zeros(()), torch.exp(-(k - 1) / 4))


def anchor_range(n_prompt: int, n_tokens: int) -> range:
    """Anchors inside the completion: at least one context position and one label after the anchor."""
    return range(max(n_prompt, 1), n_tokens - 1)


def sample_anchors(n_prompt: int, n_tokens: int, n_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """Up to ``n_blocks`` distinct anchors drawn uniformly from :func:`anchor_range`, sorted."""
    r = anchor_range(n_prompt, n_tokens)
    if len(r) == 0:
        return torch.empty(0, dtype=torch.long)
    pick = torch.randperm(len(r), generator=gen)[:n_blocks]
    return (pick + r.start).sort().values


@dataclass
class Blocks:
    """Packed queries of a batch: ``[B, Q]`` with ``Q = n_blocks * block_size``."""

    q_ids: torch.Tensor
    q_pos: torch.Tensor
    labels: torch.Tensor
    slot: torch.Tensor
    visible: torch.Tensor  # [B, Q, T + Q]

    def to(self, device) -> Blocks:
        return Blocks(*(getattr(self, f).to(device) for f in ("q_ids", "q_pos", "labels", "slot", "visible")))


def build_blocks(tokens: list[torch.Tensor], anchors: list[torch.Tensor], block_size: int, mask_token_id: int,
                 ctx_len: int) -> Blocks:
    """Queries, labels and the visibility mask for sequences ``tokens`` with their ``anchors``."""
    b = len(tokens)
    nb = max(1, max(len(a) for a in anchors))
    q = nb * block_size
    slot = torch.arange(block_size).repeat(nb)
    q_ids = torch.full((b, q), mask_token_id, dtype=torch.long)
    q_pos = torch.zeros((b, q), dtype=torch.long)
    labels = torch.full((b, q), IGNORE, dtype=torch.long)
    visible = torch.zeros((b, q, ctx_len + q), dtype=torch.bool)
    blk = torch.arange(q) // block_size
    same_block = blk[:, None] == blk[None, :]
    visible[:, :, ctx_len:] = same_block
    for i, (toks, anc) in enumerate(zip(tokens, anchors, strict=True)):
        n = len(anc)
        if n == 0:
            continue
        m = n * block_size
        pos = (anc[:, None] + torch.arange(block_size)).reshape(-1)
        q_pos[i, :m] = pos
        q_ids[i, :m:block_size] = toks[anc]
        lab = toks[pos.clamp(max=len(toks) - 1)]
        lab = torch.where((pos < len(toks)) & (slot[:m] > 0), lab, torch.full_like(lab, IGNORE))
        labels[i, :m] = lab
        visible[i, :m, :ctx_len] = torch.arange(ctx_len)[None, :] < anc.repeat_interleave(block_size)[:, None]
    return Blocks(q_ids, q_pos, labels, slot.expand(b, q), visible)


def weighted_ce(logits: torch.Tensor, blocks: Blocks, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ w_k·CE_k / Σ w_k over the labelled slots; also returns the weight sum (for averaging batches)."""
    ce = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), blocks.labels.flatten().clamp(min=0),
                                           reduction="none")
    w = weights[blocks.slot.flatten()] * (blocks.labels.flatten() != IGNORE)
    total = w.sum()
    return (ce * w).sum() / total.clamp(min=math.ulp(1.0)), total
