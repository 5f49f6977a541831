"""Pure logic: statistics, extraction, result files, /metrics parsing, KL plumbing, compare, plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from radiance_bench import compare, gsm8k, kld, perf, plot, results
from radiance_bench.client import metric_sum, parse_prometheus
from radiance_bench.prompts import Filler, mixbench_categories
from radiance_bench.stats import latency_summary, renormalised_kl, sign_test


def test_sign_test_counts_discordant_only():
    a = [True] * 10 + [True] * 6 + [False] * 1 + [False] * 3
    b = [True] * 10 + [False] * 6 + [True] * 1 + [False] * 3
    r = sign_test(a, b)
    assert (r["a_only"], r["b_only"], r["discordant"]) == (6, 1, 7)
    assert r["p_value"] == pytest.approx(sps.binomtest(6, 7, 0.5).pvalue)
    assert sign_test([True], [True])["p_value"] == 1.0
    with pytest.raises(ValueError, match="paired"):
        sign_test([True], [])


def test_renormalised_kl_matches_definition():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(8), size=5)
    q = rng.dirichlet(np.ones(8), size=5)
    k = 4  # scale the top-k slice: renormalisation removes it
    lp, lq = np.log(p[:, :k] * 0.7), np.log(q[:, :k] * 0.3)
    pn, qn = p[:, :k] / p[:, :k].sum(1, keepdims=True), q[:, :k] / q[:, :k].sum(1, keepdims=True)
    assert np.allclose(renormalised_kl(lp, lq), (pn * np.log(pn / qn)).sum(1))
    assert np.allclose(renormalised_kl(lp, lp), 0.0)
    assert (renormalised_kl(lp, lq) >= 0).all()


def test_latency_summary_names_and_units():
    s = latency_summary("ttft", [0.1, 0.2, None, 0.3], (50, 90))
    assert s == pytest.approx({"ttft_ms_mean": 200.0, "ttft_ms_p50": 200.0, "ttft_ms_p90": 280.0})
    assert latency_summary("itl", [])["itl_ms_p50"] is None


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("so 3 + 4 = 7\n#### 7", "7", "7"),
        ("#### $1,200.00 dollars", "1200", "1200"),
        ("The answer is -3.5.", None, "-3.5"),
        ("#### 12 and later 13", "12", "13"),
        ("no number", None, None),
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert gsm8k.extract_strict(text) == strict
    assert gsm8k.extract_flexible(text) == flexible


def test_gsm8k_builtin_set_and_prompts(tmp_path):
    items = gsm8k.load_items(None)
    assert len(items) == 20 and len({i["id"] for i in items}) == 20
    path, payload = gsm8k.build_request(items[0], items[1:3], "completion", 64, 0.0, 1, "m")
    assert path == "/v1/completions" and payload["prompt"].count("Question:") == 3
    assert payload["prompt"].endswith(f"Question: {items[0]['question']}\nAnswer:")
    path, payload = gsm8k.build_request(items[0], [], "chat", 64, 0.0, 1, "m")
    assert path == "/v1/chat/completions" and len(payload["messages"]) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: answer has no"):
        gsm8k.load_items(bad)


def test_result_write_is_atomic_and_checked(tmp_path):
    res = results.envelope("gsm8k", {"url": "u", "model": "m", "seed": 0}, {"n": 1})
    assert {"date", "versions"} <= set(res["config"]) and res["config"]["versions"]["python"]
    p = results.write_json(res, tmp_path / "r" / "x.json")
    assert results.load(p) == res and [f.name for f in p.parent.iterdir()] == ["x.json"]
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "x"}))
    with pytest.raises(ValueError, match="missing schema"):
        results.load(tmp_path / "bad.json")


METRICS = """# HELP vllm:spec_decode_num_drafts_total drafts
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 18.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
vllm:num_requests_running{engine="0"} 0.0
"""


def test_spec_decode_counters_and_delta():
    m = parse_prometheus(METRICS)
    assert metric_sum(m, "vllm:num_requests_running") == 0.0 and metric_sum(m, "nope") is None
    after = perf.spec_counters(m)
    before = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_pos": [0.0, 0.0, 0.0]}
    d = perf.spec_delta(before, after)
    assert d["acceptance_per_draft"] == 1.8 and d["tokens_per_update"] == 2.8
    assert d["acceptance_rate"] == 0.6 and d["acceptance_per_pos"] == [0.9, 0.6, 0.3]
    assert perf.spec_counters(parse_prometheus("vllm:num_requests_running 0\n")) is None


def test_parse_lengths():
    assert perf.parse_lengths("25,8k,max", 16384, 256) == ([25, 8192, 16128], [])
    assert perf.parse_lengths("2048,65536", 4096, 1) == ([2048], [65536])
    with pytest.raises(ValueError, match="max_model_len"):
        perf.parse_lengths("max", None, 1)
    with pytest.raises(ValueError, match="no length"):
        perf.parse_lengths("4096", 1024, 1)


def test_filler_prompts_exact_and_seeded():
    f = Filler(list(range(100, 300)))
    assert len(f.prompt(1000, 3)) == 1000 and f.prompt(50, 3) == f.prompt(50, 3)
    assert f.prompt(50, 3) != f.prompt(50, 4)
    a, b = f.prompt(64, 3, unique=32, nonce=1), f.prompt(64, 3, unique=32, nonce=2)
    assert a[:32] != b[:32] and a[32:] == b[32:]


def test_mixbench_categories_shipped():
    cats = mixbench_categories()
    assert list(cats) == ["chat", "code", "json", "math", "file_edit", "prose", "reasoning", "summarization"]
    assert sum(c["weight"] for c in cats.values()) == pytest.approx(1.0)
    assert all(len(c["prompts"]) >= 3 for c in cats.values())


def _body(tokens, rows):
    """A vLLM-shaped completion body with prompt logprobs ``rows`` ({id: logprob} per position)."""
    plp = [None] + [
        {str(t): {"logprob": v, "rank": r + 1} for r, (t, v) in enumerate(sorted(d.items(), key=lambda e: -e[1]))}
        for d in rows
    ]
    return {"choices": [{"prompt_token_ids": tokens, "prompt_logprobs": plp}]}


def test_kld_parse_compare_and_reference_roundtrip(tmp_path):
    lp = np.log([0.5, 0.3, 0.15, 0.05])
    ref_rows = [dict(zip([1, 2, 3, 4], lp, strict=True))] * 2
    cand_rows = [{1: np.log(0.4), 2: np.log(0.4), 3: np.log(0.2)}, {2: np.log(0.6), 1: np.log(0.3), 3: np.log(0.1)}]
    tokens = [9, 1, 3]
    ref = kld.parse_prompt_logprobs(_body(tokens, ref_rows), 2, False)
    assert ref.ids.tolist() == [[1, 2], [1, 2]] and ref.tok_lp.tolist() == pytest.approx([lp[0], lp[2]])
    cand = kld.parse_prompt_logprobs(_body(tokens, cand_rows), 2, True)
    part = kld.compare_chunk(ref, cand)
    p = np.array([0.5, 0.3]) / 0.8
    assert part["kl"][0] == pytest.approx((p * np.log(p / np.array([0.5, 0.5]))).sum())
    assert part["kl"][1] == pytest.approx((p * np.log(p / (np.array([0.3, 0.6]) / 0.9))).sum())
    assert part["same_top"].tolist() == [True, False] and part["missing"] == 0
    s = kld.summarise([part])
    assert s["same_top_p"] == 0.5 and s["topk_mass_left_out_mean"] == pytest.approx(0.2)
    chunks = [{"corpus": "c", "index": 0, "sha": "ab"}]
    kld.save_reference(tmp_path / "ref.npz", chunks, [ref], {"top_k": 2})
    meta, back = kld.load_reference(tmp_path / "ref.npz")
    assert meta["top_k"] == 2 and meta["chunks"] == chunks
    assert np.array_equal(back[0].ids, ref.ids) and np.array_equal(back[0].tokens, ref.tokens)
    other = kld.parse_prompt_logprobs(_body([9, 1, 4], ref_rows), 2, True)
    with pytest.raises(ValueError, match="token_mismatch"):
        kld.compare_chunk(ref, other)


def test_chunking_is_by_characters(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("abcdefghij" * 5)
    chunks = kld.chunk_corpora([f], 12, 10)
    assert [c["text"] for c in chunks] == ["abcdefghijab", "cdefghijabcd", "efghijabcdef", "ghijabcdefgh"]
    with pytest.raises(ValueError, match="shorter than one"):
        kld.chunk_corpora([f], 100, 1)


def _gsm_result(oks, model):
    items = [{"id": f"q{i}", "strict_ok": ok, "flexible_ok": ok} for i, ok in enumerate(oks)]
    k = sum(oks)
    summary = {"n": len(oks), "strict_acc": k / len(oks), "flexible_acc": k / len(oks), "truncated": 0, "errored": 0}
    return results.envelope("gsm8k", {"model": model, "url": "u"}, summary, items=items)


def test_compare_gsm8k_sign_test():
    a = _gsm_result([True] * 8 + [False] * 2, "a")
    b = _gsm_result([True] * 3 + [False] * 5 + [True] * 2, "b")
    cmp = compare.compare([a, b])
    st = cmp["sign_tests"][0]["strict"]
    assert (st["a_only"], st["b_only"]) == (5, 2)
    assert st["p_value"] == pytest.approx(sps.binomtest(5, 7).pvalue)
    assert cmp["summary"]["strict_acc"] == [0.8, 0.5]
    assert compare.tables(cmp)
    with pytest.raises(ValueError, match="one kind"):
        compare.compare([a, results.envelope("kld", {}, {})])


def _mix_result(scale, model):
    cats = [{"category": c, "decode_tok_s": scale * (i + 1)} for i, c in enumerate(["chat", "code"])]
    prompts = [{"id": f"p{i}", "decode_tok_s": scale * (10 + i)} for i in range(6)]
    sweep = [{"concurrency": c, "aggregate_tok_s": scale * 100 * c**0.5} for c in (1, 2, 4, 8, 16)]
    return results.envelope(
        "mixbench",
        {"model": model, "url": "u", "date": "2026-11-29T09:00:00"},
        {"combined_decode_tok_s": scale * 1.5},
        categories=cats,
        prompts=prompts,
        sweep=sweep,
    )


def test_compare_mixbench_pairs_prompts_and_plot(tmp_path):
    a, b = _mix_result(1.0, "a"), _mix_result(1.2, "b")
    cmp = compare.compare([a, b])
    w = cmp["paired_prompts"][0]
    assert w["paired"] == 6 and w["median_ratio"] == pytest.approx(1.2) and w["b_faster"] == 6
    assert cmp["series"]["decode_tok_s"]["code"] == [2.0, 2.4]
    png = plot.plot([a, b], tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
