"""Client robustness against a fake server: errors, timeouts, broken streams and a dead server are
counted and reported within bounded time, never hang."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from fakeserver import FakeServer
from typer.testing import CliRunner

from radiance_bench import gsm8k
from radiance_bench.cli import app
from radiance_bench.client import Client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake():
    srv = FakeServer()
    yield srv
    srv.stop()


def _post(url, **kw):
    async def go():
        async with Client(url, "fake", backoff=0.01, **kw) as c:
            out = await c.post("/v1/completions", {"prompt": "x"})
            return out, c.stats()

    return asyncio.run(go())


def test_ok_and_stream(fake):
    out, stats = _post(fake.url)
    assert out.ok and out.text.endswith("#### 7") and stats["errors"] == {}

    async def go():
        async with Client(fake.url, "fake") as c:
            return await c.stream("/v1/completions", {"prompt": "x"})

    s = asyncio.run(go())
    assert s.ok and s.text == "The answer is 7.\n#### 7" and len(s.chunk_times) == 3
    assert s.completion_tokens == 3 and s.ttft is not None and len(s.itl) == 2


def test_5xx_retried_then_counted(fake):
    fake.mode = "500"
    out, stats = _post(fake.url, retries=2)
    assert not out.ok and out.error == "http_500" and out.attempts == 3
    assert stats == stats | {"requests": 1, "retries": 2, "errors": {"http_500": 1}}
    assert fake.hits == 3


def test_4xx_not_retried(fake):
    fake.mode = "400"
    out, stats = _post(fake.url, retries=3)
    assert out.error == "http_400" and fake.hits == 1 and stats["retries"] == 0


def test_flaky_recovers(fake):
    fake.mode = "flaky"
    out, stats = _post(fake.url, retries=1)
    assert out.ok and stats["retries"] == 1 and stats["errors"] == {}


def test_timeout_bounded(fake):
    fake.mode = "hang"
    t0 = time.monotonic()
    out, stats = _post(fake.url, timeout=0.5, retries=1)
    assert out.error == "timeout" and out.attempts == 2
    assert time.monotonic() - t0 < 5


def test_stream_dies_mid_response(fake):
    fake.mode = "die"

    async def go():
        async with Client(fake.url, "fake", retries=2, backoff=0.01) as c:
            return await c.stream("/v1/completions", {"prompt": "x"}), c.stats()

    out, stats = asyncio.run(go())
    # tokens had arrived, so the broken stream is not replayed
    assert not out.ok and out.error in ("protocol", "read") and out.attempts == 1
    assert out.text == "half"


def test_deadline_stops_the_run(fake):
    fake.mode = "hang"

    async def go():
        async with Client(fake.url, "fake", timeout=10, retries=0, deadline=0.6) as c:
            return await asyncio.gather(*(c.post("/v1/completions", {"prompt": str(i)}) for i in range(3)))

    t0 = time.monotonic()
    outs = asyncio.run(go())
    assert time.monotonic() - t0 < 3
    assert {o.error for o in outs} == {"timeout"}


def test_server_dies_during_gsm8k(fake):
    """The server goes away after a few answers: the rest fail fast (connect, then server_down)."""
    items = gsm8k.load_items(None)

    def kill():
        while fake.hits < 3:
            time.sleep(0.01)
        fake.stop()

    threading.Thread(target=kill, daemon=True).start()

    async def go():
        async with Client(fake.url, "fake", retries=2, backoff=0.01, down_after=3) as c:
            recs = await gsm8k.run(c, items, items, 0, "chat", 32, 0.0, 0, 1, progress=False)
            return recs, c.stats()

    t0 = time.monotonic()
    recs, stats = asyncio.run(go())
    assert time.monotonic() - t0 < 20
    summary = gsm8k.summarise(recs)
    assert summary["n"] == 20 and 3 <= summary["n"] - summary["errored"] < 20
    assert stats["errors"].get("server_down", 0) > 0


def test_cli_reports_errors_and_exits_nonzero(fake, tmp_path):
    fake.mode = "500"
    out = tmp_path / "g.json"
    r = CliRunner().invoke(
        app,
        ["gsm8k", "--url", fake.url, "--limit", "3", "--retries", "1", "--out", str(out), "--no-progress"],
    )
    assert r.exit_code == 3, r.output
    res = json.loads(out.read_text())
    assert res["summary"]["errored"] == 3 and res["client"]["errors"] == {"http_500": 3}
    assert res["config"]["url"] == fake.url and res["config"]["model"] == "fake"


def test_cli_gsm8k_ok(fake, tmp_path):
    out = tmp_path / "g.json"
    r = CliRunner().invoke(app, ["gsm8k", "--url", fake.url, "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    s = json.loads(out.read_text())["summary"]
    assert s["n"] == 20 and s["strict_correct"] == s["flexible_correct"] == 1  # only "7" is right


def test_missing_optional_endpoints_are_not_errors(fake):
    async def go():
        async with Client(fake.url, "fake") as c:
            return await c.metrics(), await c.server_info(), c.stats()

    metrics, info, stats = asyncio.run(go())
    assert metrics is None and info == {"version": "fake-0", "max_model_len": 1024, "root": None}
    assert stats["errors"] == {}
