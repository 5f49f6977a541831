"""The DFlash drafter's configuration, as the ``config.json`` vLLM 0.32's ``dflash`` method reads.

Facts the layout follows (vLLM ``qwen3_dflash.py`` / ``config/speculative.py``): architecture
``DFlashDraftModel`` with ``model_type`` ``qwen3``; ``dflash_config.target_layer_ids`` are 0-based target
decoder layers whose *outputs* (residual stream, before the final norm) are concatenated as the context
features (vLLM taps ``aux layer = id + 1``); ``dflash_config.mask_token_id`` fills the masked query slots;
``block_size`` = 1 bonus token + the drafted positions. Embedding and LM head are the target's (shared,
not in the checkpoint), so ``hidden_size`` and ``vocab_size`` equal the target's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ARCHITECTURE = "DFlashDraftModel"


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_target_layers: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int = 8
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 32768

    @property
    def num_features(self) -> int:
        return len(self.target_layer_ids)

    @property
    def num_draft_tokens(self) -> int:
        """Drafted positions per block (vLLM's ``num_speculative_tokens``)."""
        return self.block_size - 1

    def validate(self) -> None:
        bad = [i for i in self.target_layer_ids if not 0 <= i < self.num_target_layers]
        if bad or not self.target_layer_ids:
            raise ValueError(f"target_layer_ids {list(self.target_layer_ids)} must be non-empty and within "
                             f"0..{self.num_target_layers - 1}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside the vocabulary (0..{self.vocab_size - 1})")
        if self.block_size < 2:
            raise ValueError(f"block_size {self.block_size} must be >= 2 (bonus token + at least one draft)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    def to_hf(self, dtype: str = "float32") -> dict:
        """The ``config.json`` dict vLLM's dflash loader reads."""
        return {
            "architectures": [ARCHITECTURE],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "attention_bias": False,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": False,
            "num_target_layers": self.num_target_layers,
            "block_size": self.block_size,
            "dflash_config": {"target_layer_ids": list(self.target_layer_ids), "mask_token_id": self.mask_token_id},
            "dtype": dtype,
        }

    @classmethod
    def from_hf(cls, d: dict) -> DrafterConfig:
        if ARCHITECTURE not in d.get("architectures", []):
            raise ValueError(f"not a DFlash drafter config (architectures={d.get('architectures')})")
        dc = d.get("dflash_config") or {}
        rope = d.get("rope_parameters") or {"rope_theta": d.get("rope_theta", 1_000_000.0)}
        return cls(
            hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"], num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d["num_key_value_heads"],
            head_dim=d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"],
            vocab_size=d["vocab_size"], num_target_layers=d["num_target_layers"],
            target_layer_ids=tuple(dc["target_layer_ids"]), mask_token_id=dc["mask_token_id"],
            block_size=d.get("block_size", 8), rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope["rope_theta"]), max_position_embeddings=d.get("max_position_embeddings", 32768),
        )

    @classmethod
    def load(cls, path: str | Path) -> DrafterConfig:
        p = Path(path)
        return cls.from_hf(json.loads((p / "config.json" if p.is_dir() else p).read_text()))


def spread_layer_ids(num_target_layers: int, num_features: int) -> tuple[int, ...]:
    """Evenly spaced tap layers; on deep targets skip the first layer and the last two."""
    if num_features < 1 or num_features > num_target_layers:
        raise ValueError(f"cannot tap {num_features} of {num_target_layers} target layers")
    lo, hi = (1, num_target_layers - 3) if num_target_layers > 8 else (0, num_target_layers - 1)
    if num_features == 1:
        return ((lo + hi) // 2,)
    ids = tuple(round(lo + i * (hi - lo) / (num_features - 1)) for i in range(num_features))
    if len(set(ids)) != len(ids):
        raise ValueError(f"{num_features} taps do not fit in layers {lo}..{hi}")
    return ids


def drafter_config_for_target(
    target_dir: str | Path,
    *,
    num_layers: int = 1,
    num_features: int | None = None,
    target_layer_ids: tuple[int, ...] | None = None,
    block_size: int = 8,
    mask_token_id: int,
    intermediate_size: int | None = None,
    num_key_value_heads: int | None = None,
) -> DrafterConfig:
    """A drafter shaped like the target's layers (width, heads, RoPE) with ``num_layers`` layers."""
    t = json.loads((Path(target_dir) / "config.json").read_text())
    t = t.get("text_config", t)
    n = t["num_hidden_layers"]
    ids = tuple(target_layer_ids) if target_layer_ids else spread_layer_ids(n, num_features or min(5, n))
    rope = t.get("rope_parameters") or {"rope_theta": t.get("rope_theta", 1_000_000.0)}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"target rope_type {rope.get('rope_type')!r} is not supported (default RoPE only)")
    cfg = DrafterConfig(
        hidden_size=t["hidden_size"], intermediate_size=intermediate_size or t["intermediate_size"],
        num_hidden_layers=num_layers, num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=num_key_value_heads or t["num_key_value_heads"],
        head_dim=t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"],
        vocab_size=t["vocab_size"], num_target_layers=n, target_layer_ids=ids, mask_token_id=mask_token_id,
        block_size=block_size, rms_norm_eps=t.get("rms_norm_eps", 1e-6), rope_theta=float(rope["rope_theta"]),
        max_position_embeddings=t.get("max_position_embeddings", 32768),
    )
    cfg.validate()
    return cfg
