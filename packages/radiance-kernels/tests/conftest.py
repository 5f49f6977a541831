"""Test setup for radiance-kernels.

Without a GPU the Triton kernels run in the interpreter (``TRITON_INTERPRET=1`` must be set before any
kernel module is imported). ``RADIANCE_FULL_SHAPES=1`` on a GPU machine runs the 27B-class shapes.
"""

import os

import pytest
import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
FULL_SHAPES = GPU and os.environ.get("RADIANCE_FULL_SHAPES", "") == "1"
DEVICE = "cuda" if GPU else "cpu"
REL = 1.7e-3  # GEMM bf16 output floor (relative Frobenius error)


def gemm_error(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative Frobenius error, worst element) of a bf16 GEMM output against a bf16 reference.

    The worst element is ``max(|out - ref| - ulp(ref)) / max|ref|``: each element may first differ by
    one bf16 ulp of the reference (two bf16 roundings of fp32 sums taken in a different order can land
    on neighbouring values), then the rest is measured against the largest output. Without that
    allowance a single one-ulp flip of an output just above a power of two reads ``2^-7 / 1.0x`` =
    up to 7.8e-3 of the max, above the ``4 * REL`` element bar (seen on the H200: 6.85e-3 at
    tp2 mlp.down, M=2048, relative error 4.1e-4)."""
    o, r = out.double().cpu(), ref.double().cpu()
    d = (o - r).abs()
    ulp = torch.ldexp(torch.ones_like(r), torch.frexp(r).exponent - 8)  # bf16: 8 significant bits
    rel = (d.norm() / r.norm()).item()
    worst = ((d - ulp).clamp(min=0).max() / r.abs().max()).item()
    return rel, worst


@pytest.fixture
def device() -> str:
    return DEVICE


#: defined for every compile-for-sm_90 script: ``ptxas_v(ptx)``, what the bundled ptxas says of the PTX (``-v``:
#: registers, spill bytes, its performance warnings)
SM90_PRELUDE = """
def ptxas_v(ptx):
    import os, subprocess, tempfile
    import triton
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    info = subprocess.run([ptxas, "--gpu-name=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                          text=True).stderr
    os.unlink(f.name)
    return info
"""


def compiled_for_sm90(script: str) -> list[dict]:
    """Run a compile-for-sm_90 ``script`` (after :data:`SM90_PRELUDE`) in a clean process (the interpreter's patches
    of the language break compilation in this one; no GPU needed) and return the JSON list it prints last; skips
    without a bundled ptxas."""
    import json
    import subprocess
    import sys

    import triton

    if not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")):
        pytest.skip("this Triton has no bundled ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", SM90_PRELUDE + script], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])
