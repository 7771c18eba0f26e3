"""The bench's HTTP side: where a target is (TCP or Unix socket), one streamed completion and
one embeddings request.

Completions go to `POST /v1/completions` with `stream`, `stream_options.include_usage` and
`ignore_eos` (a vLLM sampling parameter, so the engine generates exactly `max_tokens` tokens).
Time to first token is taken at the first SSE event that carries a choice; the output token count
is the engine's own (the usage chunk) when the stream ends, else the number of choice events read.
Embeddings go to `POST /v1/embeddings` with a list of documents as `input` (scenario H).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable
from typing import Any

import aiohttp

from llmd.errors import BenchError, TargetUnavailable

UDS_HOST = "http://engine"


@dataclasses.dataclass(frozen=True)
class Target:
    """An OpenAI-compatible server: `http://HOST:PORT` (a trailing `/v1` is dropped), or
    `unix:/path/to.sock` (vLLM's `--uds`, llmd's engine socket). `label` names it in reports."""

    label: str
    url: str
    base_url: str
    uds: str | None = None

    @classmethod
    def parse(cls, label: str, url: str) -> Target:
        """Raises `BenchError` for anything but http(s):// and unix: URLs."""
        if url.startswith("unix:"):
            path = url.removeprefix("unix:").removeprefix("//")
            if not path:
                raise BenchError(f"--{label} {url!r}: expected unix:/path/to.sock")
            return cls(label, url, UDS_HOST, path)
        if url.startswith(("http://", "https://")):
            base = url.rstrip("/").removesuffix("/v1")
            return cls(label, url, base)
        raise BenchError(f"{url!r}: expected http://HOST:PORT or unix:/path/to.sock")

    def session(self, timeout_s: float) -> aiohttp.ClientSession:
        """A client session with no connection limit (the bench sets the concurrency)."""
        connector: aiohttp.BaseConnector = (
            aiohttp.UnixConnector(path=self.uds, limit=0)
            if self.uds
            else aiohttp.TCPConnector(limit=0)
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(timeout_s, 30))
        return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def fetch_json(
    session: aiohttp.ClientSession,
    target: Target,
    path: str,
    headers: tuple[tuple[str, str], ...] = (),
) -> Any:
    """GET `path` on `target` as JSON, with `headers` (an API key). Raises `TargetUnavailable`
    when it does not answer 200 JSON."""
    try:
        async with session.get(target.base_url + path, headers=list(headers)) as response:
            if response.status != 200:
                raise TargetUnavailable(f"{target.url}{path}: HTTP {response.status}")
            return await response.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        reason = (exc.os_error.strerror or str(exc.os_error)).lower()
        raise TargetUnavailable(f"nothing answers on {target.url} ({reason})") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise TargetUnavailable(f"{target.url}{path}: {exc or type(exc).__name__}") from None


@dataclasses.dataclass
class RequestResult:
    """What happened to one request. Times are seconds: `start` from the step's start, `ttft`
    and `e2e` from the request's start. `outcome`: ok | disconnected (the bench hung up on
    purpose) | error | timeout; `error_kind` says which ("429 queue_full", "stream ...")."""

    index: int
    component: str
    planned_prompt: int
    planned_output: int
    start: float
    outcome: str = "ok"
    error_kind: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    chunks: int = 0
    finish_reason: str | None = None
    documents: int = 0  # an embeddings request's: the vectors it got back
    user: int = -1  # the simulated user that sent it (-1: none in particular)
    retry_after: float | None = None  # an error answer's Retry-After, seconds


@dataclasses.dataclass(frozen=True)
class EmbedCall:
    """An embeddings request to send: model, the documents' texts."""

    model: str
    documents: tuple[str, ...]
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Call:
    """The request to send: model, prompt text, max_tokens, and when to hang up (chunks)."""

    model: str
    prompt: str
    max_tokens: int
    disconnect_after: int | None = None
    headers: tuple[tuple[str, str], ...] = ()


async def stream_completion(
    session: aiohttp.ClientSession,
    target: Target,
    call: Call,
    result: RequestResult,
    timeout_s: float,
    clock_zero: float,
) -> RequestResult:
    """Send `call` and fill `result` in place (also returned). Never raises for HTTP, network or
    timeout failures: they become the result's outcome."""
    body = {
        "model": call.model,
        "prompt": call.prompt,
        "max_tokens": call.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    result.start = started - clock_zero
    await _guarded(_exchange(session, target, call, body, result, started), result, timeout_s)
    if result.outcome in ("ok", "disconnected"):
        result.e2e = time.perf_counter() - started
    return result


async def embed(
    session: aiohttp.ClientSession,
    target: Target,
    call: EmbedCall,
    result: RequestResult,
    timeout_s: float,
    clock_zero: float,
) -> RequestResult:
    """Send `call` to `POST /v1/embeddings` and fill `result` in place (also returned): its
    `documents` (vectors received; fewer than sent is an error `short_answer`) and
    `prompt_tokens` (the usage's). Never raises for HTTP, network or timeout failures."""
    body = {"model": call.model, "input": list(call.documents)}
    started = time.perf_counter()
    result.start = started - clock_zero
    await _guarded(_embeddings(session, target, call, body, result), result, timeout_s)
    if result.outcome == "ok":
        result.e2e = time.perf_counter() - started
    return result


async def _guarded(exchange: Awaitable[None], result: RequestResult, timeout_s: float) -> None:
    """Await `exchange` within `timeout_s`; a timeout or a network failure becomes `result`'s
    outcome."""
    try:
        async with asyncio.timeout(timeout_s):
            await exchange
    except TimeoutError:
        result.outcome, result.error_kind = "timeout", "timeout"
    except aiohttp.ServerDisconnectedError:
        result.outcome, result.error_kind = "error", "server_disconnected"
    except (aiohttp.ClientError, OSError) as exc:
        result.outcome, result.error_kind = "error", f"connection {type(exc).__name__}"


async def _embeddings(
    session: aiohttp.ClientSession,
    target: Target,
    call: EmbedCall,
    body: dict[str, Any],
    result: RequestResult,
) -> None:
    async with session.post(
        target.base_url + "/v1/embeddings", json=body, headers=dict(call.headers)
    ) as response:
        raw = await response.read()
        if response.status != 200:
            result.outcome = "error"
            result.error_kind = f"{response.status} {_error_code(raw)}"
            return
    try:
        answer = json.loads(raw)
        result.documents = len(answer["data"])
        result.prompt_tokens = (answer.get("usage") or {}).get("prompt_tokens")
    except (ValueError, KeyError, TypeError):
        result.outcome, result.error_kind = "error", "non_json"
        return
    if result.documents < len(call.documents):
        result.outcome, result.error_kind = "error", "short_answer"


async def _exchange(
    session: aiohttp.ClientSession,
    target: Target,
    call: Call,
    body: dict[str, Any],
    result: RequestResult,
    started: float,
) -> None:
    async with session.post(
        target.base_url + "/v1/completions", json=body, headers=dict(call.headers)
    ) as response:
        if response.status != 200:
            result.outcome = "error"
            result.error_kind = f"{response.status} {_error_code(await response.read())}"
            result.retry_after = _seconds(response.headers.get("retry-after"))
            return
        done = False
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                done = True
                break
            event = json.loads(payload)
            if "error" in event:
                result.outcome = "error"
                result.error_kind = f"stream {_code_of(event)}"
                return
            if event.get("choices"):
                if result.ttft is None:
                    result.ttft = time.perf_counter() - started
                result.chunks += 1
                reason = event["choices"][0].get("finish_reason")
                if reason:
                    result.finish_reason = reason
                if call.disconnect_after is not None and result.chunks >= call.disconnect_after:
                    result.outcome = "disconnected"
                    result.output_tokens = result.chunks
                    response.close()  # drop the connection: the server must abort the sequence
                    return
            usage = event.get("usage")
            if usage:
                result.prompt_tokens = usage.get("prompt_tokens")
                result.output_tokens = int(usage.get("completion_tokens", 0))
        if not done:
            result.outcome, result.error_kind = "error", "stream_truncated"
        elif result.prompt_tokens is None:
            result.output_tokens = result.chunks


def _seconds(value: str | None) -> float | None:
    """A Retry-After given in seconds (RFC 9110 10.2.3; an HTTP date is not read)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error_code(raw: bytes) -> str:
    try:
        return _code_of(json.loads(raw))
    except ValueError:
        return "non_json"


def _code_of(body: Any) -> str:
    """The `code` (else `type`) of an OpenAI-shaped error body, as text."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("code") or error.get("type") or "unknown")
    return str(error or "unknown")
