"""Deferred split reductions served (``RADIANCE_STREAM_DEFER``): the tiny int4 checkpoint in bf16 with the fused
producers, once with the decode GEMMs leaving their split partials to the producers (the default) and once with every
GEMM reducing its own — greedy completions and full prompt log-probabilities identical (the partials summed in split
order are the GEMM's output bit for bit), and the log names how many GEMMs deferred. Two servers, one at a time."""

from __future__ import annotations

from conftest import greedy_and_scored

from radiance_vllm.served_formats import FORMATS

LOG_LINE = "[radiance.stream] fused producers"


def test_deferred_reductions_serve_the_same_bits(tiny_float, tmp_path_factory):
    root = tmp_path_factory.mktemp("sd")  # short: vLLM's IPC socket path under it must fit 107 characters
    model = FORMATS["int4"].build(tiny_float, root / "int4")[0]
    deferred = greedy_and_scored(model, root / "a", env={"RADIANCE_STREAM": "1"}, dtype="bfloat16")
    reduced = greedy_and_scored(model, root / "b", env={"RADIANCE_STREAM": "1", "RADIANCE_STREAM_DEFER": "0"},
                                dtype="bfloat16")
    assert deferred["greedy"] == reduced["greedy"]
    assert all(a.equal(b) for a, b in zip(deferred["logprobs"], reduced["logprobs"], strict=True))
    line = next(ln for ln in deferred["log"].splitlines() if LOG_LINE in ln)
    assert " 0 GEMMs" not in line and "GEMMs leave their split partials" in line, line
    assert " 0 GEMMs leave" in next(ln for ln in reduced["log"].splitlines() if LOG_LINE in ln)
