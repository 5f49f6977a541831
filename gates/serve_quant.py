"""Served quantized-format gates: each Radiance format of the tiny Qwen3 served by a real vLLM server on
127.0.0.1 through the radiance-vllm plugin, checked against an independent transformers reference with
the format's dequantized weights and its activation quantization simulated from the format specs.

One server at a time: each gate starts its server, checks it and stops it before the next gate.
"""

from __future__ import annotations

import subprocess
import sys

from gates.core import Row, fmt
from gates.serve import tiny_model
from radiance_kernels.ops.w4a8_gemm import DECODE_MAX_M
from radiance_vllm.served_checks import PROMPTS, format_report, sequential_texts, stream_concurrently
from radiance_vllm.served_formats import BAD_PAIRS_MESSAGE, FORMATS, corrupt_pairs
from radiance_vllm.server import VLLMServer

#: KL(simulated reference ‖ served): the reference simulates the same weights, rotation, activation
#: quantization and bf16 GEMM output, leaving only vLLM's fp32 reassociation (~1e-6 relative); the
#: activation quantization's own KL is 2e-4..2e-3 here; the served KL must stay under 1e-4 and under a
#: tenth of it, so a path that skipped or mis-simulated the activation quantization fails.
KL_BAR = 1e-4
ACT_FRACTION = 0.1


def checkpoint(ctx, name: str):
    return ctx.cached(f"quant:{name}", lambda: FORMATS[name].build(tiny_model(ctx), ctx.workdir / f"quant-{name}"))


def server_for(ctx, model, name: str, env: dict[str, str], launcher: bool = False) -> VLLMServer:
    return VLLMServer(model, ctx.workdir / f"server-quant-{name}", args=["--max-logprobs", "-1"], env=env,
                      launcher=launcher)


def format_rows(ctx, name: str) -> list[Row]:
    spec = FORMATS[name]
    served_dir, ref_dir = checkpoint(ctx, name)
    with server_for(ctx, served_dir, name, spec.env, spec.launcher) as server:
        rep = format_report(server, ref_dir, spec.act, prompts=spec.prompts)
        rows = [
            Row(f"serve_quant {name}: server healthy" + (" (radiance serve)" if spec.launcher else ""),
                f"{server.startup_seconds:.0f} s", "healthy", True),
            Row(f"serve_quant {name}: greedy == simulated reference",
                f"{sum(rep['greedy_equal'])}/{len(rep['greedy_equal'])} prompts",
                "all, token for token", all(rep["greedy_equal"])),
            Row(f"serve_quant {name}: prompt KL vs reference",
                f"{fmt(rep['kl_served'])} (act-quant KL {fmt(rep['kl_act'])})",
                f"< min({KL_BAR:g}, {ACT_FRACTION:g} x act-quant KL)",
                rep["kl_served"] < min(KL_BAR, ACT_FRACTION * rep["kl_act"])),
        ]
        if len(spec.act) > 2:  # a decode-band element: some prompt must be prefilled past the band, in the other
            longest = max(rep["prompt_tokens"])
            rows.append(Row(f"serve_quant {name}: a prompt past the decode band (prefill {spec.act[0]}, decode "
                            f"{spec.act[2]})", f"{longest} prompt tokens", f"> {DECODE_MAX_M}",
                            longest > DECODE_MAX_M))
        log = server.log_path.read_text()
        printed = log.count("[radiance] kernel backend: ")
        rows.append(Row(f"serve_quant {name}: backend chosen explicitly, printed once", f"printed {printed}x",
                        "exactly once", printed == 1))
        if spec.launcher:  # radiance serve: its compile-cache key, then vLLM's own server in its place
            execs = "[radiance] compile-cache key" in log and "vllm.entrypoints.openai.api_server" in log
            rows.append(Row(f"serve_quant {name}: radiance serve execs vLLM's server", f"cache key + exec: {execs}",
                            "both logged", execs))
        if spec.env.get("RADIANCE_CHECKALL") == "1":
            lines = [ln for ln in log.splitlines() if "[radiance.checkall]" in ln]
            real = sum("real inputs" in ln for ln in lines)
            rows.append(Row(f"serve_quant {name}: CHECKALL in serve", f"{len(lines)} checks, {real} on real inputs",
                            "all ok, some real", real > 0 and "FAIL" not in log))
        if name == "int4":
            prompts = [f"{PROMPTS[i % len(PROMPTS)]} {i}" for i in range(16)]
            sequential = sequential_texts(server, prompts, 16)
            texts, errors = stream_concurrently(server, prompts, 16)
            same = sum(a == b for a, b in zip(texts, sequential, strict=True))
            rows.append(Row(f"serve_quant {name}: 16 concurrent streams", f"{errors} errors, {same}/16 == sequential",
                            "0 errors, 16/16", errors == 0 and same == 16))
    return rows


def bad_checkpoint_rows(ctx) -> list[Row]:
    bad = corrupt_pairs(checkpoint(ctx, "int4")[0], ctx.workdir / "quant-int4-bad-pairs")
    server = server_for(ctx, bad, "bad-pairs", {})
    try:
        server.start(timeout=900)
        up = True
    except (RuntimeError, TimeoutError):
        up = False
    finally:
        server.stop()
    named = BAD_PAIRS_MESSAGE in server.log_path.read_text()
    return [Row("serve_quant: pairs not a permutation fails at load", "refused, tensor named" if named and not up
                else f"up={up} named={named}", "server never healthy, message names the tensor", named and not up)]


RENAME = """
import radiance_kernels.ops.registry as r
r._OPS["w4a8_gemm_v2"] = r._OPS.pop("w4a8_gemm")
from vllm.plugins import load_general_plugins
load_general_plugins()
"""


def renamed_op_rows(ctx) -> list[Row]:
    r = subprocess.run([sys.executable, "-c", RENAME], capture_output=True, text=True, timeout=600)
    loud = "radiance-vllm refuses to register" in r.stderr and "op 'w4a8_gemm'" in r.stderr
    return [Row("serve_quant: renamed kernel op refuses plugin registration", f"exit {r.returncode}, op named={loud}",
                "non-zero exit naming the op", r.returncode != 0 and loud)]


def gates(ctx):
    yield "serve_quant renamed op", lambda: renamed_op_rows(ctx)
    for name in FORMATS:
        yield f"serve_quant {name}", lambda name=name: format_rows(ctx, name)
    yield "serve_quant bad checkpoint", lambda: bad_checkpoint_rows(ctx)
