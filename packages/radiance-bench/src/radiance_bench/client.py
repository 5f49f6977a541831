"""Async OpenAI-compatible HTTP client with bounded retries, deadlines and failure accounting.

Every request ends in an `Outcome`, never an exception and never a hang: each attempt is bounded by
``timeout`` seconds (connect + whole response, streaming included), a failed attempt is retried at
most ``retries`` times (transport errors, timeouts, 429 and 5xx; other 4xx are not retried), nothing
is sent after the run ``deadline``, and after ``down_after`` consecutive transport failures the server
is taken as down and the remaining requests fail at once as ``server_down``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import httpx

from radiance_bench.console import progress_bar

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?)\s+(\S+)")


@dataclass
class Outcome:
    """One request: ok or an error kind; timings in seconds relative to the send of the last attempt."""

    ok: bool
    error: str | None = None
    attempts: int = 0
    body: dict | None = None
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft: float | None = None
    e2e: float | None = None
    chunk_times: list[float] = field(default_factory=list)

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: gaps between consecutive content chunks (one chunk per engine step)."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (e2e - TTFT) / (completion tokens - 1)."""
        if self.ttft is None or self.e2e is None or not self.completion_tokens or self.completion_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.completion_tokens - 1)


class _Retryable(Exception):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class _Fatal(Exception):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class Client:
    """A server at ``url`` serving ``model``; use as ``async with``."""

    def __init__(
        self,
        url: str,
        model: str | None = None,
        *,
        timeout: float = 300.0,
        retries: int = 2,
        deadline: float | None = None,
        down_after: int = 5,
        backoff: float = 0.5,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.url = url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self.deadline_at = None if deadline is None else time.monotonic() + deadline
        self.deadline = deadline
        self.down_after = down_after
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )
        self.requests = 0
        self.retried = 0
        self.errors: Counter[str] = Counter()
        self._consecutive_transport = 0

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    def stats(self) -> dict:
        """Request, retry and error counts for the result's ``client`` block."""
        return {
            "requests": self.requests,
            "retries": self.retried,
            "errors": dict(self.errors),
            "timeout_s": self.timeout,
            "max_retries": self.retries,
            "deadline_s": self.deadline,
        }

    @property
    def server_down(self) -> bool:
        return self._consecutive_transport >= self.down_after

    def _remaining(self) -> float:
        return float("inf") if self.deadline_at is None else self.deadline_at - time.monotonic()

    async def _attempts(self, once: Callable[[Outcome], Awaitable[None]], optional: bool = False) -> Outcome:
        """Run ``once`` under the retry/deadline/server-down policy; ``optional``: a 404 is no error."""
        out = Outcome(ok=False)
        self.requests += 1
        for attempt in range(self.retries + 1):
            if self.server_down:
                out.error = "server_down"
                break
            budget = min(self.timeout, self._remaining())
            if budget <= 0:
                out.error = "deadline"
                break
            if attempt:
                self.retried += 1
            out.attempts = attempt + 1
            try:
                async with asyncio.timeout(budget):
                    await once(out)
                self._consecutive_transport = 0
                out.ok, out.error = True, None
                return out
            except TimeoutError:
                out.error = "timeout"
                self._consecutive_transport += 1
            except httpx.TransportError as exc:
                out.error = {
                    httpx.ConnectError: "connect",
                    httpx.RemoteProtocolError: "protocol",
                    httpx.ReadError: "read",
                }.get(type(exc), type(exc).__name__)
                self._consecutive_transport += 1
            except _Retryable as exc:
                out.error = exc.kind
                self._consecutive_transport = 0
            except _Fatal as exc:
                out.error = exc.kind
                self._consecutive_transport = 0
                break
            if out.chunk_times:  # a stream that broke after tokens arrived is not replayed
                break
            if attempt < self.retries:
                await asyncio.sleep(min(self.backoff * 2**attempt, max(self._remaining(), 0)))
        if not (optional and out.error == "http_404"):
            self.errors[out.error] += 1
        return out

    @staticmethod
    def _check(resp: httpx.Response) -> None:
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retryable(f"http_{resp.status_code}")
        if resp.status_code >= 400:
            raise _Fatal(f"http_{resp.status_code}")

    async def post(self, path: str, payload: dict) -> Outcome:
        """POST JSON, whole response in ``Outcome.body``."""

        async def once(out: Outcome) -> None:
            t0 = time.perf_counter()
            resp = await self.http.post(path, json=payload)
            self._check(resp)
            try:
                out.body = resp.json()
            except json.JSONDecodeError as exc:
                raise _Retryable("bad_json") from exc
            out.e2e = time.perf_counter() - t0
            _fill_usage(out, out.body)
            choice = (out.body.get("choices") or [{}])[0]
            out.text = choice.get("text") or (choice.get("message") or {}).get("content") or ""
            out.finish_reason = choice.get("finish_reason")

        return await self._attempts(once)

    async def stream(self, path: str, payload: dict) -> Outcome:
        """POST with ``stream: true``; records TTFT, the time of every content chunk and the usage."""
        payload = {**payload, "stream": True, "stream_options": {"include_usage": True}}

        async def once(out: Outcome) -> None:
            out.text, out.chunk_times, out.ttft, out.finish_reason = "", [], None, None
            t0 = time.perf_counter()
            async with self.http.stream("POST", path, json=payload) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    self._check(resp)
                done = False
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError as exc:
                        raise _Retryable("bad_json") from exc
                    if "error" in chunk:
                        raise _Fatal("stream_error")
                    _fill_usage(out, chunk)
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("text")
                        if delta is None:
                            d = choice.get("delta") or {}
                            delta = (d.get("content") or "") + (d.get("reasoning_content") or d.get("reasoning") or "")
                        if delta:
                            t = time.perf_counter() - t0
                            out.ttft = t if out.ttft is None else out.ttft
                            out.chunk_times.append(t)
                            out.text += delta
                        out.finish_reason = choice.get("finish_reason") or out.finish_reason
            if not done:
                raise httpx.RemoteProtocolError("stream ended without [DONE]")
            out.e2e = time.perf_counter() - t0

        return await self._attempts(once)

    async def get(self, path: str, optional: bool = False) -> Outcome:
        """GET; JSON body in ``body`` when it parses, else the text in ``text``; ``optional``: an
        endpoint the server may lack (404 is not counted as an error)."""

        async def once(out: Outcome) -> None:
            resp = await self.http.get(path)
            self._check(resp)
            out.text = resp.text
            try:
                out.body = resp.json()
            except (json.JSONDecodeError, ValueError):
                out.body = None

        return await self._attempts(once, optional)

    async def resolve_model(self) -> str:
        """The ``--model`` given, else the first model the server lists."""
        if self.model:
            return self.model
        out = await self.get("/v1/models")
        if not out.ok or not (out.body or {}).get("data"):
            raise RuntimeError(f"{self.url}/v1/models: no model listed ({out.error}); pass --model")
        self.model = out.body["data"][0]["id"]
        return self.model

    async def server_info(self) -> dict:
        """Server version and the model's ``max_model_len`` where the server reports them."""
        info: dict = {}
        ver = await self.get("/version", optional=True)
        if ver.ok and ver.body:
            info["version"] = ver.body.get("version")
        models = await self.get("/v1/models")
        for m in (models.body or {}).get("data", []) if models.ok else []:
            if m.get("id") == self.model:
                info.update(max_model_len=m.get("max_model_len"), root=m.get("root"))
        return info

    async def tokenize(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` from the server's ``/tokenize``."""
        out = await self.post(
            "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens}
        )
        if not out.ok:
            raise RuntimeError(f"{self.url}/tokenize failed: {out.error}")
        return out.body["tokens"]

    async def metrics(self) -> dict[str, float] | None:
        """/metrics as {sample name with labels: value}; None when the endpoint is missing."""
        out = await self.get("/metrics", optional=True)
        return parse_prometheus(out.text) if out.ok else None


def _fill_usage(out: Outcome, body: dict) -> None:
    usage = body.get("usage") or {}
    out.prompt_tokens = usage.get("prompt_tokens", out.prompt_tokens)
    out.completion_tokens = usage.get("completion_tokens", out.completion_tokens)


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition → {``name{labels}``: value} (comments skipped)."""
    values = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            try:
                values[m.group(1)] = float(m.group(2))
            except ValueError:
                continue
    return values


def metric_sum(metrics: dict[str, float], name: str, **labels: str) -> float | None:
    """Sum of every sample of ``name`` whose labels include ``labels``; None when there is none."""
    total, seen = 0.0, False
    for key, v in metrics.items():
        base, _, lab = key.partition("{")
        if base != name or any(f'{k}="{val}"' not in lab for k, val in labels.items()):
            continue
        total, seen = total + v, True
    return total if seen else None


async def gather_bounded(
    items: Iterable,
    fn: Callable[[object], Awaitable[object]],
    concurrency: int,
    label: str,
    progress: bool = True,
) -> list:
    """``fn`` over ``items`` with at most ``concurrency`` in flight, in input order, with a progress bar."""
    items = list(items)
    sem = asyncio.Semaphore(max(1, concurrency))
    with progress_bar(progress) as bar:
        task = bar.add_task(label, total=len(items))

        async def one(item):
            async with sem:
                try:
                    return await fn(item)
                finally:
                    bar.advance(task)

        return await asyncio.gather(*(one(i) for i in items))
