"""radiance-vllm: the vLLM plugin serving Radiance checkpoints through radiance-kernels.

:func:`check_kernels` checks the radiance-kernels op manifest against :data:`REQUIRED_OPS`; the plugin's
``register()`` calls it first (a missing or renamed op stops vLLM at start), and so does the import of
:mod:`radiance_vllm.kernel_calls`, the one module that calls ``torch.ops.radiance``.
"""

#: The kernel ops this package calls, with the exact versions it was written against.
REQUIRED_OPS = {"rotate_quant": 1, "w4a8_gemm": 1, "mxfp4_gemm": 1, "add_rms_norm_rotate_quant": 2,
                "gated": 2, "gated_rotate_quant": 2, "w4a8_gemm_partials": 1, "skinny_gemm": 2}


def check_kernels() -> None:
    """Raise ImportError naming every required op that is missing, renamed or at another version."""
    import radiance_kernels

    radiance_kernels.require("radiance-vllm", REQUIRED_OPS)
