"""The tiny served checkpoints of every format, as the tests and gates use them.

Each :class:`ServedFormat` builds, from the tiny float model, the checkpoint to serve and the checkpoint
the independent reference reads (the same one, except NVFP4: the reference reads radiance-quant's
offline NVFP4 → MXFP4 conversion, so the plugin's load-time requant is checked against it), plus the
knobs it is served with, the activation quantization the reference simulates, and whether it is
started through the ``radiance serve`` launcher.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from safetensors.torch import load_file, save_file

#: a prompt past the decode band (more than 64 tokens of the tiny tokenizer): prefilled in RADIANCE_PQ_ACT's
#: element where RADIANCE_PQ_DECODE_ACT names another for the decode steps
LONG_PROMPT = ("The mill stood at the bend of the river, where the water slowed and turned brown with the clay "
               "of the banks. Every morning the miller opened the sluice, counted the sacks the farmers had left "
               "by the door, and wrote their names in a ledger that was older than he was. In the spring of the "
               "flood year the ledger")


def _rotated(fmt: str) -> Callable[[Path, Path], tuple[Path, Path]]:
    def build(base: Path, out: Path) -> tuple[Path, Path]:
        from radiance_quant.build import build as build_rotated

        build_rotated(base, out, fmt, seed=0)
        return out, out

    return build


def _nvfp4(base: Path, out: Path) -> tuple[Path, Path]:
    from radiance_quant.nvfp4 import build_tiny_nvfp4, convert

    build_tiny_nvfp4(base, out)
    ref = out.with_name(out.name + "-offline-mxfp4")
    convert(out, ref, rule="mse", fp8_layers="mxfp4")
    return out, ref


def _nvfp4_offline(base: Path, out: Path) -> tuple[Path, Path]:
    """radiance-quant's offline NVFP4 → MXFP4 checkpoint (``radiance_mxfp4``), served as is."""
    _, converted = _nvfp4(base, out)
    return converted, converted


@dataclass(frozen=True)
class ServedFormat:
    build: Callable[[Path, Path], tuple[Path, Path]]
    #: (element, granularity[, decode-band element]): what the reference simulates (:mod:`.sim_reference`)
    act: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    #: started through ``radiance serve`` instead of vLLM's module directly
    launcher: bool = False
    #: prompts checked beside ``served_checks.PROMPTS``
    prompts: tuple[str, ...] = ()


FORMATS = {
    "int4": ServedFormat(_rotated("int4"), ("e4m3", "group"), {"RADIANCE_CHECKALL": "1"}),
    "int5-i8-ptok-zpe-stream": ServedFormat(_rotated("int5"), ("int8", "token"),
                                            {"RADIANCE_PQ_ACT": "int8", "RADIANCE_PQ_SCALES": "token",
                                             "RADIANCE_PQ_ZPE": "1", "RADIANCE_STREAM": "1"}),
    "int4-i8-decode-stream": ServedFormat(_rotated("int4"), ("e4m3", "group", "int8"),
                                          {"RADIANCE_PQ_DECODE_ACT": "int8", "RADIANCE_STREAM": "1"},
                                          prompts=(LONG_PROMPT,)),
    "mxfp4-paro": ServedFormat(_rotated("mxfp4"), ("e4m3", "token"), launcher=True),
    "nvfp4-to-mxfp4": ServedFormat(_nvfp4, ("e4m3", "token"), {"RADIANCE_NVFP4_MXFP4": "1"}),
    "radiance-mxfp4-offline": ServedFormat(_nvfp4_offline, ("e4m3", "token")),
}

#: The corrupted tensor and the message the failed load must carry.
BAD_PAIRS_TENSOR = "model.layers.1.self_attn.k_proj.pairs"
BAD_PAIRS_MESSAGE = ("model.layers.1.self_attn.k_proj.{pairs,theta,channel_scales}: "
                     "pairs layer 2 group 0 is not a permutation")


def corrupt_pairs(src: Path, dst: Path) -> Path:
    """A copy of checkpoint ``src`` whose :data:`BAD_PAIRS_TENSOR` repeats one channel in layer 2, group 0."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    for f in sorted(dst.glob("*.safetensors")):
        tensors = load_file(f)
        if BAD_PAIRS_TENSOR in tensors:
            pairs = tensors[BAD_PAIRS_TENSOR].clone()
            pairs[2, 1] = pairs[2, 0]
            tensors[BAD_PAIRS_TENSOR] = pairs
            save_file({k: v.contiguous() for k, v in tensors.items()}, f, metadata={"format": "pt"})
            return dst
    raise KeyError(f"{src}: no tensor {BAD_PAIRS_TENSOR}")
