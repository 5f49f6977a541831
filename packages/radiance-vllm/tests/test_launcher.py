import json

import pytest
from typer.testing import CliRunner

from radiance_vllm.cli import app
from radiance_vllm.launcher import ServeOptions, vllm_command


def test_named_options_map_to_vllm_arguments():
    cmd = vllm_command(ServeOptions(model="m", tensor_parallel_size=2, speculative_method="dflash",
                                    speculative_depth=7, drafter="/d", gpu_memory_utilization=0.9,
                                    kv_cache_dtype="fp8", max_model_len=4096, chunk_size=512))
    arg = dict(zip(cmd, cmd[1:], strict=False))
    assert arg["--tensor-parallel-size"] == "2" and arg["--gpu-memory-utilization"] == "0.9"
    assert arg["--kv-cache-dtype"] == "fp8" and arg["--max-model-len"] == "4096"
    assert arg["--max-num-batched-tokens"] == "512"
    assert json.loads(arg["--speculative-config"]) == {"method": "dflash", "num_speculative_tokens": 7, "model": "/d"}
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


@pytest.mark.parametrize("kw", [{"speculative_method": "dflash", "speculative_depth": 3},
                                {"speculative_depth": 3}, {"speculative_method": "ngram"}])
def test_inconsistent_speculation_is_refused(kw):
    with pytest.raises(ValueError):
        vllm_command(ServeOptions(model="m", **kw))


def test_serve_dry_run_prints_the_command_with_forwarded_knobs(monkeypatch):
    monkeypatch.setenv("RADIANCE_PQ_ZPE", "1")
    r = CliRunner().invoke(app, ["serve", "/ckpt", "--dry-run", "--knob", "RADIANCE_PQ_ACT=int8",
                                 "--max-model-len", "512", "--", "--seed", "3"])
    assert r.exit_code == 0, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("RADIANCE_PQ_ACT=int8 RADIANCE_PQ_ZPE=1 ")
    assert "--model /ckpt" in line and "--max-model-len 512" in line and line.endswith("--seed 3")


def test_serve_rejects_a_bad_knob():
    r = CliRunner().invoke(app, ["serve", "/ckpt", "--dry-run", "--knob", "RADIANCE_PQ_ACT=fp4"])
    assert r.exit_code != 0 and "RADIANCE_PQ_ACT" in r.output


@pytest.mark.parametrize("knobs", [["RADIANCE_STREAM=1"], ["RADIANCE_PQ_DECODE_ACT=int8"],
                                   ["RADIANCE_CHECKALL=1", "RADIANCE_STREAM=1"]])
def test_serve_refuses_per_call_knobs_on_a_compiled_forward(knobs):
    """Knobs that act per call in Python need --enforce-eager (vLLM's compiled forward is traced once): refused
    without it, naming them; accepted with it, as an option or passed through to vLLM."""
    args = ["serve", "/ckpt", "--dry-run", *[a for k in knobs for a in ("--knob", k)]]
    r = CliRunner().invoke(app, args)
    assert r.exit_code != 0 and all(k.split("=")[0] in r.output for k in knobs) and "--enforce-eager" in r.output
    for eager in (["--enforce-eager"], ["--", "--enforce-eager"]):
        r = CliRunner().invoke(app, args + eager)
        assert r.exit_code == 0, r.output
