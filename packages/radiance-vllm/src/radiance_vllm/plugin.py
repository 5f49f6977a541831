"""vLLM general-plugin entry point (``vllm.general_plugins`` → ``radiance_vllm.plugin:register``).

vLLM calls :func:`register` in every process (API server, engine core, workers). It is idempotent and
cheap: it checks the kernel manifest (a missing/renamed op raises, which stops vLLM), parses the knobs
(unknown names and bad values raise) and applies the process-wide ones (``RADIANCE_PDL``), registers the
quantization configs, and prints the settings and the backend once.
"""

from __future__ import annotations

_REGISTERED = False


def register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from radiance_vllm import check_kernels

    try:
        check_kernels()
    except ImportError as exc:
        raise RuntimeError(f"radiance-vllm refuses to register: {exc}") from exc
    from radiance_kernels.backends import set_programmatic_launch
    from radiance_vllm import backend, knobs, quant_registry

    set_programmatic_launch(knobs.settings().pdl)
    if knobs.settings().stream:
        from radiance_vllm import stream

        stream.patch_loader()
    quant_registry.register_configs()
    knobs.announce(backend.describe())
    _REGISTERED = True
