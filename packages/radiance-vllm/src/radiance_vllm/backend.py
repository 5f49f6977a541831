"""The kernel backend for this process: explicit, resolved once, never switched.

``RADIANCE_BACKEND=auto`` means ``triton`` on a CUDA/ROCm vLLM platform and ``reference`` on vLLM's CPU
platform; an explicit ``triton`` on a platform without a GPU raises at start.
"""

from __future__ import annotations

from functools import cache

from radiance_vllm.knobs import KnobError, settings


@cache
def kernel_backend() -> str:
    from vllm.platforms import current_platform

    gpu = current_platform.is_cuda_alike()
    choice = settings().backend
    if choice == "auto":
        return "triton" if gpu else "reference"
    if choice == "triton" and not gpu:
        raise KnobError(f"RADIANCE_BACKEND=triton but vLLM's platform is {current_platform.device_type!r} (no GPU)")
    return choice


def describe() -> str:
    from vllm.platforms import current_platform

    return f"[radiance] kernel backend: {kernel_backend()} (vLLM platform {current_platform.device_type})"
