"""Our reader and dequantisation against the real producers, run in a throwaway venv (opt-in: --external).

z-lab `paroquant` 0.1.16 (`convert`, real mode, with CPU stand-ins for its CUDA rotation op) and
llm-compressor 0.14 / compressed-tensors 0.19 (`oneshot` NVFP4 and MXFP4) cannot share our environment:
compressed-tensors 0.19 conflicts with vLLM's pinned 0.17, and paroquant's transformers extra pulls
autoawq/torchvision. The venv gets PyPI's torch 2.13.0 (the CUDA build, which runs on CPU).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from radiance_kernels.formats import awq, mx, rotation
from radiance_quant import nvfp4, paroquant
from radiance_quant.io import Checkpoint

HERE = Path(__file__).parent / "external"
PINS = ["torch==2.13.0", "paroquant==0.1.16", "llmcompressor==0.14.0.1", "compressed-tensors==0.19.0"]


@pytest.fixture(scope="module")
def ext(request, tmp_path_factory):
    if not request.config.getoption("--external"):
        pytest.skip("needs --external (installs paroquant + llm-compressor into a throwaway venv)")
    base = request.getfixturevalue("base")
    if shutil.which("uv") is None:
        pytest.fail("--external needs `uv` on PATH to build the throwaway venv")
    work = tmp_path_factory.mktemp("ext")
    py = work / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    subprocess.run(
        ["uv", "venv", "-q", "-p", f"{sys.version_info.major}.{sys.version_info.minor}", str(work / "venv")],
        check=True,
        env=env,
    )
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(py), *PINS], check=True, env=env)
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(py), "--no-deps", "autoawq==0.2.9"], check=True, env=env
    )
    for script in ("zlab_paroquant.py", "ct_nvfp4.py"):
        subprocess.run([str(py), str(HERE / script), str(base), str(work)], check=True, env=env)
    return work


def test_zlab_paroquant(ext, base):
    """Their checkpoint verifies; our unpacked codes/zeros/scales equal what their convert computed (bit-exact),
    our dequantised weight equals AutoAWQ's (bit-exact in fp16), our fp32 rotated linear is within fp16
    rounding of their reference forward, and our RTN in our rotation reproduces every one of their codes."""
    ours = paroquant.verify(ext / "zlab", base=base)
    assert ours["quantization_config"] == {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 8}
    assert set(ours["unquantized"]) == {"lm_head", "model.embed_tokens"}
    cap = torch.load(ext / "zlab_capture.pt")
    ck, b = Checkpoint(ext / "zlab"), Checkpoint(base)
    assert len(cap) == 14
    for m, c in cap.items():
        t = {k: ck.get(f"{m}.{k}") for k in paroquant.QUANT_TENSORS}
        codes, zeros, scales, _ = awq.from_checkpoint(t)
        assert torch.equal(codes.long(), c["codes"].T.long()), m
        assert torch.equal(zeros.long(), c["zeros"].T.long()), m
        assert torch.equal(scales, c["scales"].T.half()), m
        w = awq.dequantize(codes, zeros, scales)
        assert torch.equal(w.half(), c["w_deq"]), m
        y = rotation.rotate(c["x"].float(), t["pairs"], t["theta"], t["channel_scales"]) @ w
        assert float((y - c["y"].float()).abs().max() / c["y"].float().abs().max()) < 3e-3, m
        wt = paroquant.to_rotated(b.get(f"{m}.weight").half(), t["pairs"], t["theta"], t["channel_scales"])
        q = torch.round(wt.T.float() / scales.float().repeat_interleave(128, 0)) + zeros.float().repeat_interleave(
            128, 0
        )
        assert torch.equal(q.clamp(0, 15), codes.float()), m


def test_llmcompressor_nvfp4_mxfp4(ext, base, tmp_path):
    """compressed-tensors' own dequantisation equals ours bit for bit (NVFP4 and MXFP4); our NVFP4 producer
    gives the same scales, global scales (gate/up fused) and values; our converter reads their checkpoint."""
    cap = torch.load(ext / "ct_capture.pt")
    nv, mxc, b = Checkpoint(ext / "ct_NVFP4"), Checkpoint(ext / "ct_MXFP4"), Checkpoint(base)
    assert len(cap["NVFP4"]) == len(cap["MXFP4"]) == 14
    for m, w in cap["NVFP4"].items():
        assert nvfp4.module_kind(nv, m) == "nvfp4"
        assert torch.equal(nvfp4.dequantize_module(nv, m), w), m
        glob = nv.get(f"{m}.weight_global_scale")
        mine = nvfp4.nvfp4_quantize(b.get(f"{m}.weight"), glob)
        assert torch.equal(mine["weight_scale"].view(torch.uint8), nv.get(f"{m}.weight_scale").view(torch.uint8)), m
        assert torch.equal(nvfp4.nvfp4_dequantize(mine["weight_packed"], mine["weight_scale"], glob), w), m
        if ".mlp." in m:
            partner = m.replace("gate_proj", "up_proj") if "gate_proj" in m else m.replace("up_proj", "gate_proj")
            expect = torch.minimum(
                nvfp4.global_scale(b.get(f"{m}.weight")), nvfp4.global_scale(b.get(f"{partner}.weight"))
            )
            assert torch.equal(glob, expect), m
    r = nvfp4.convert(ext / "ct_NVFP4", tmp_path / "o")
    assert len(r["linears"]) == 14
    for m, w in cap["MXFP4"].items():
        packed, scales = mxc.get(f"{m}.weight_packed"), mxc.get(f"{m}.weight_scale")
        assert torch.equal(mx.dequantize_mxfp4(packed, scales), w), m
        # their exponent: the OCP floor rule on amax rounded to a 2-bit mantissa (mantissa >= 1.75 -> next binade)
        w0 = b.get(f"{m}.weight")
        amax = w0.reshape(w0.shape[0], -1, 32).abs().amax(-1)
        bump = (amax / torch.exp2(torch.floor(torch.log2(amax)))) >= 1.75
        assert torch.equal(scales.long(), mx.quantize_mxfp4(w0, "ocp")[1].long() + bump.long()), m
