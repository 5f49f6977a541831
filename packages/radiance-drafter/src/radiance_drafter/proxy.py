"""Offline proxy: expected accepted tokens per block, from the drafter's and the target's logits.

For every anchor ``a`` of a held-out captured sequence with a full block after it, the drafter proposes
``d_k = argmax`` of its slot-k logits (vLLM's greedy draft sampling). Under rejection sampling with a
one-hot draft, slot k is accepted with probability ``α_k = p_T(d_k | x_{<a+k})``, the target's
sampling probability of the draft (temperature T, then top-k / top-p as the verifier applies them; at
T = 0: 1 if ``d_k`` is the target's argmax, else 0); the target's logits are ``lm_head(final)`` from
the capture; the prefix is the captured one.

Two averages are reported:
- ``acc_per_block``: ``Σ_k Π_{j<=k} α_j`` averaged over *every* anchor (token-weighted);
- ``acc_per_draft``: the decode walk — start at the first completion token, accept ``m`` slots (each
  while a uniform draw stays below ``α_k``; exact at T = 0), jump to ``a + m + 1`` — averaged over the
  blocks the walk visits. This weights sources and passages the way serving does (easy text takes
  fewer drafts), so it is the figure to set beside the served ``accepted / drafts``.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from tqdm import tqdm

from radiance_drafter.capture import CaptureSet
from radiance_drafter.model import DFlashDrafter, TargetHeads
from radiance_drafter.train import check_compatible, forward_blocks


def target_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """The target's sampling distribution as the verifier applies it: temperature, then top-k (0: off), then
    top-p (the smallest most-probable set whose mass reaches ``top_p``; 1: off), renormalised."""
    if not 0 < top_p <= 1 or top_k < 0:
        raise ValueError(f"proxy: top_p must be in (0, 1] and top_k >= 0, got {top_p}, {top_k}")
    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_k or top_p < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        keep = torch.ones_like(sorted_p, dtype=torch.bool)
        if top_k:
            keep[..., top_k:] = False
        if top_p < 1:
            keep &= (sorted_p.cumsum(-1) - sorted_p) < top_p  # the mass before a token is still short of top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def _new(k: int) -> dict:
    return {"blocks": 0, "accepted": 0.0, "tokens": 0, "walk_drafts": 0, "walk_accepted": 0,
            "pos": torch.zeros(k, dtype=torch.float64), "top1": torch.zeros(k, dtype=torch.float64)}


@torch.no_grad()
def offline_proxy(drafter: DFlashDrafter, heads: TargetHeads, data: CaptureSet, temperature: float,
                  seed: int = 0, blocks_per_forward: int = 64, device: str = "cpu", top_p: float = 1.0,
                  top_k: int = 0) -> dict:
    """Per-anchor and decode-walk acceptance, overall and per source (see module docstring)."""
    check_compatible(drafter, heads, data)
    k = drafter.cfg.num_draft_tokens
    drafter.eval()
    acc: dict[str, dict] = defaultdict(lambda: _new(k))
    for i, s in enumerate(tqdm(data, total=len(data), desc="proxy", unit="seq")):
        r = acc[s.source]
        r["tokens"] += len(s.tokens) - s.n_prompt
        anchors = torch.arange(max(s.n_prompt, 1), len(s.tokens) - k)
        if len(anchors) == 0:
            continue
        p_t = target_probs(heads.logits(s.final.to(device)), temperature, top_p, top_k)
        alphas = []
        for chunk in anchors.split(blocks_per_forward):
            logits, _ = forward_blocks(drafter, heads, [s], [chunk], device)
            drafts = logits[0].view(len(chunk), k + 1, -1)[:, 1:].argmax(-1).cpu()
            pos = chunk[:, None] + torch.arange(1, k + 1)
            alphas.append(p_t[(pos - 1).to(device)].gather(-1, drafts[..., None].to(device))[..., 0].cpu().double())
            r["top1"] += (drafts == s.tokens[pos]).double().sum(0)
        alpha = torch.cat(alphas)
        prefix = alpha.cumprod(-1)
        r["blocks"] += len(anchors)
        r["accepted"] += prefix.sum().item()
        r["pos"] += prefix.sum(0)
        draws = torch.rand(alpha.shape, generator=torch.Generator().manual_seed(seed * 1_000_003 + i),
                           dtype=torch.float64)
        accepted = (draws < alpha).long().cumprod(-1).sum(-1)
        j = 0
        while j < len(anchors):
            r["walk_drafts"] += 1
            r["walk_accepted"] += accepted[j].item()
            j += accepted[j].item() + 1
    return {**summarize(acc, temperature, k), "top_p": top_p, "top_k": top_k}


def summarize(acc: dict, temperature: float, k: int) -> dict:
    def one(r):
        n = max(r["blocks"], 1)
        return {"acc_per_draft": r["walk_accepted"] / max(r["walk_drafts"], 1), "drafts": r["walk_drafts"],
                "acc_per_block": r["accepted"] / n, "blocks": r["blocks"], "completion_tokens": r["tokens"],
                "accept_rate_by_pos": (r["pos"] / n).tolist(), "top1_by_pos": (r["top1"] / n).tolist()}

    total = _new(k)
    for r in acc.values():
        for key in total:
            total[key] = total[key] + r[key]
    return {"kind": "offline_proxy", "temperature": temperature, "draft_tokens": k, **one(total),
            "per_source": {src: one(r) for src, r in sorted(acc.items())}}
