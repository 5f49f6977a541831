"""The DFlash block drafter in plain torch, with the checkpoint tensor names vLLM's dflash loader reads.

Math (one block at anchor ``a``; ``K = block_size - 1``):
  context   c_t = hidden_norm(fc(concat_l h_l[t]))  for target positions t < a (h_l: tapped layer outputs)
  queries   x = embed([x_a, mask, ..., mask])        at positions a .. a+K (target embedding, frozen)
  per layer: u = input_layernorm(x); q = q_norm(q_proj(u)); k = k_norm(k_proj([c; u])); v = v_proj([c; u]);
             RoPE (neox) on q and k at their positions; attention is non-causal inside the block and sees
             every context position; x += o_proj(attn); x += mlp(post_attention_layernorm(x))
  logits    lm_head(norm(x)) at the K mask slots (target LM head, frozen) predict x_{a+1} .. x_{a+K}.
The context K/V use the same per-layer projections as the queries' (vLLM precomputes them from
``hidden_norm(fc(.))``). Tensor names: ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``,
``layers.{i}.self_attn.{q,k}_norm.weight``, ``layers.{i}.mlp.{gate,up,down}_proj.weight``,
``layers.{i}.{input,post_attention}_layernorm.weight``, ``norm.weight``, ``fc.weight``, ``hidden_norm.weight``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from radiance_drafter.config import DrafterConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding of ``x`` [B, S, heads, d] at integer positions ``pos`` [B, S]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos.to(torch.float32)[..., None] * inv  # [B, S, d/2]
    cos, sin = ang.cos()[:, :, None, :], ang.sin()[:, :, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        h, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.nh, self.nkv, self.hd, self.theta = nh, nkv, hd, cfg.rope_theta
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, u, ctx, q_pos, kv_pos, visible):
        b, s, _ = u.shape
        kv_in = torch.cat([ctx, u], dim=1)
        q = self.q_norm(self.q_proj(u).view(b, s, self.nh, self.hd))
        k = self.k_norm(self.k_proj(kv_in).view(b, kv_in.shape[1], self.nkv, self.hd))
        v = self.v_proj(kv_in).view(b, kv_in.shape[1], self.nkv, self.hd)
        q, k = rope(q, q_pos, self.theta), rope(k, kv_pos, self.theta)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=visible[:, None], enable_gqa=self.nh != self.nkv)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, ctx, q_pos, kv_pos, visible):
        x = x + self.self_attn(self.input_layernorm(x), ctx, q_pos, kv_pos, visible)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """The trainable drafter (everything in the checkpoint); embedding and LM head live in :class:`TargetHeads`."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.fc = nn.Linear(cfg.num_features * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def init_weights(self, seed: int, std: float = 0.02) -> DFlashDrafter:
        """Deterministic init: linears N(0, std), norms 1."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
        return self

    def forward(self, feats, ctx_pos, q_emb, q_pos, visible):
        """feats [B, T, L*H] context features; q_emb [B, Q, H]; visible [B, Q, T+Q] bool → hidden [B, Q, H]."""
        ctx = self.hidden_norm(self.fc(feats.to(self.fc.weight.dtype)))
        kv_pos = torch.cat([ctx_pos, q_pos], dim=1)
        x = q_emb.to(ctx.dtype)
        for layer in self.layers:
            x = layer(x, ctx, q_pos, kv_pos, visible)
        return self.norm(x)


class TargetHeads(nn.Module):
    """The target's input embedding and LM head, frozen (vLLM shares them with the drafter)."""

    def __init__(self, embed: torch.Tensor, lm_head: torch.Tensor):
        super().__init__()
        self.register_buffer("embed", embed.detach().clone())
        self.register_buffer("lm_head", lm_head.detach().clone())

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.to(self.lm_head.dtype) @ self.lm_head.T

    @classmethod
    def from_target(cls, target_dir: str | Path, dtype: torch.dtype = torch.float32) -> TargetHeads:
        """Read only the embedding and LM head tensors from the target's safetensors."""
        d = Path(target_dir)
        cfg = json.loads((d / "config.json").read_text())
        tied = cfg.get("tie_word_embeddings", cfg.get("text_config", {}).get("tie_word_embeddings", False))
        found = read_target_tensors(d, {
            "embed": lambda k: k.endswith("embed_tokens.weight") and "mtp" not in k,
            "lm_head": lambda k: k == "lm_head.weight" or k.endswith(".lm_head.weight")})
        if "embed" not in found:
            raise ValueError(f"{d}: no embed_tokens.weight tensor")
        if "lm_head" not in found:
            if not tied:
                raise ValueError(f"{d}: no lm_head.weight and tie_word_embeddings is false")
            found["lm_head"] = found["embed"]
        return cls(found["embed"].to(dtype), found["lm_head"].to(dtype))


def read_target_tensors(target_dir: str | Path, wanted: dict) -> dict[str, torch.Tensor]:
    """The target checkpoint's tensors whose names match ``wanted[key](name)``, by key (one pass over the
    safetensors files, single-file or indexed); a key with no match is absent from the result."""
    d = Path(target_dir)
    index = d / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists()
             else ["model.safetensors"])
    found: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(d / f), framework="pt") as sf:
            for k in sf.keys():  # noqa: SIM118  (safe_open has no __iter__)
                for key, match in wanted.items():
                    if match(k):
                        found[key] = sf.get_tensor(k)
    return found


def save_drafter(model: DFlashDrafter, out_dir: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (the vLLM layout) atomically into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtype = dtype or next(model.parameters()).dtype
    sd = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    write_json(out / "config.json", model.cfg.to_hf(str(dtype).removeprefix("torch.")))
    return out


def load_drafter(path: str | Path, dtype: torch.dtype = torch.float32) -> DFlashDrafter:
    """Load a drafter written by :func:`save_drafter` (missing or unexpected tensors raise)."""
    p = Path(path)
    model = DFlashDrafter(DrafterConfig.load(p))
    model.load_state_dict(load_file(str(p / "model.safetensors")), strict=True)
    return model.to(dtype)


def write_json(path: Path, obj) -> None:
    """Atomic JSON write (temp + rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    tmp.replace(path)
