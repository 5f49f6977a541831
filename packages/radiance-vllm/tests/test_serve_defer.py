"""Deferred split reductions served (``RADIANCE_STREAM_DEFER``): the tiny int4 checkpoint in bf16 with the fused
producers, once with the decode GEMMs leaving their split partials to the producers (the default) and once with every
GEMM reducing its own — greedy completions and full prompt log-probabilities identical (the partials summed in split
order are the GEMM's output bit for bit), and the log names how many GEMMs deferred. Two servers, one at a time."""

from __future__ import annotations

import json

from conftest import served

from radiance_vllm.served_checks import PROMPTS, greedy, prompt_logprobs
from radiance_vllm.served_formats import FORMATS

VOCAB_ROWS = 2  # prompts whose full prompt log-probabilities are compared


def _run(model, workdir, env):
    server = served(model, workdir, env={"RADIANCE_STREAM": "1", **env}, dtype="bfloat16")
    try:
        outs = [greedy(server, p, 16) for p in PROMPTS]
        vocab = json.loads((model / "config.json").read_text())["vocab_size"]
        lps = [prompt_logprobs(server, ids + toks, vocab) for ids, toks in outs[:VOCAB_ROWS]]
        return outs, lps, server.log_path.read_text()
    finally:
        server.stop()


def test_deferred_reductions_serve_the_same_bits(tiny_float, tmp_path_factory):
    root = tmp_path_factory.mktemp("sd")  # short: vLLM's IPC socket path under it must fit 107 characters
    model = FORMATS["int4"].build(tiny_float, root / "int4")[0]
    deferred = _run(model, root / "a", {})
    reduced = _run(model, root / "b", {"RADIANCE_STREAM_DEFER": "0"})
    assert deferred[0] == reduced[0]
    assert all(a.equal(b) for a, b in zip(deferred[1], reduced[1], strict=True))
    line = next(ln for ln in deferred[2].splitlines() if "[radiance.stream] fused producers" in ln)
    assert " 0 GEMMs" not in line and "GEMMs leave their split partials" in line, line
    assert " 0 GEMMs leave" in next(ln for ln in reduced[2].splitlines() if "[radiance.stream] fused producers" in ln)
