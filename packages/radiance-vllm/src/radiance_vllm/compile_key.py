"""Key vLLM's compile cache on the knobs that change compiled code.

vLLM names its torch.compile cache dir by a hash that includes ``VllmConfig.additional_config``. At
model construction (before vLLM compiles anything in that process) :func:`stamp` writes
``additional_config["radiance_compile_key"]``, so two servers differing in a compiled-code knob never
share a cache dir, whichever way they were started.
"""

from __future__ import annotations

from radiance_vllm.knobs import settings


def stamp() -> str:
    from vllm.config import get_current_vllm_config_or_none

    key = settings().compile_cache_key()
    cfg = get_current_vllm_config_or_none()
    if cfg is not None and isinstance(cfg.additional_config, dict):
        cfg.additional_config["radiance_compile_key"] = key
    return key
