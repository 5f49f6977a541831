"""The fused producers on a served Gated DeltaNet hybrid with dense MLPs (the layout of the 27B-class targets): the
tiny ``qwen3-next-dense`` int4 checkpoint in bf16 (GDN layer, attention layer with its output gate, each with a
dense MLP, and a last GDN layer with an MoE block, which gets its mixer's producers only). Three servers, one at a
time: the producers with deferred split reductions (the default), the producers with every GEMM reducing its own,
and no producers.

- deferred vs reduced: greedy completions and full prompt log-probabilities identical (the partials summed in split
  order are the GEMM's output bit for bit);
- producers vs none: prompt log-probabilities of the same token ids within :data:`LOGPROB_TOL` and :data:`KL_TOL`
  (the producers compute vLLM's norms in another fp32 order, so a bf16 activation now and then rounds the other way,
  and with it an activation code: test_stream.py bounds the norms to 1-2 ulp), and the greedy completions equal up
  to their first near tie: where they part, the two candidates lie within 2 x LOGPROB_TOL of each other (this
  untrained model's distributions are nearly flat, so such ties come within 16 tokens);
- the log names the fused layers (3: 2 with their MLP's, 1 attention output gate) and the deferred GEMMs (6: both
  gate_up, out_proj and o_proj, both downs — layer 1's to the MoE layer's input norm).
"""

from __future__ import annotations

from functools import partial

import pytest
from conftest import assert_runs_agree, greedy_and_scored

#: Max |Δ log p| (nats) between the producers and vLLM's own norms over every vocabulary entry of every position,
#: and the mean KL(no producers ‖ producers) per prompt. Measured on 2 cores: 0.111-0.117 nats, KL 6.0e-5-8.9e-5 (4
#: prompts, 32-45 positions each); the bars are about twice that.
LOGPROB_TOL = 0.25
KL_TOL = 2e-4
LOG_LINE = "[radiance.stream] fused producers"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from radiance_quant.tiny import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("gd")  # short: vLLM's IPC socket path under it must fit 107 characters
    model = build_tiny_checkpoint(root / "int4", "paroquant-int4", family="qwen3-next-dense")
    run = partial(greedy_and_scored, model, dtype="bfloat16")
    deferred = run(root / "a", env={"RADIANCE_STREAM": "1"})
    seqs = [ids + toks for ids, toks in deferred["greedy"]]  # every run scores the same token ids
    return {"deferred": deferred,
            "reduced": run(root / "b", seqs, env={"RADIANCE_STREAM": "1", "RADIANCE_STREAM_DEFER": "0"}),
            "unfused": run(root / "c", seqs)}


def _stream_line(log: str) -> str:
    return next(ln for ln in log.splitlines() if LOG_LINE in ln)


def test_producers_installed_with_deferred_gemms(runs):
    fused = "installed on 3 decoder layers (MLP on 2; attention output gate on 1); "
    assert fused + "6 GEMMs leave" in _stream_line(runs["deferred"]["log"])
    assert fused + "0 GEMMs leave" in _stream_line(runs["reduced"]["log"])
    assert LOG_LINE not in runs["unfused"]["log"]


def test_deferred_reductions_serve_the_same_bits(runs):
    a, b = runs["deferred"], runs["reduced"]
    assert a["greedy"] == b["greedy"]
    assert all(x.equal(y) for x, y in zip(a["logprobs"], b["logprobs"], strict=True))


def test_producers_match_vllms_norms_within_tolerance(runs):
    assert_runs_agree(runs["deferred"], runs["unfused"], LOGPROB_TOL, KL_TOL)
