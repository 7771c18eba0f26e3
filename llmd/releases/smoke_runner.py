"""Gather the smoke gate's observations from a live engine on its Unix socket (HTTP with
llmd's own client, llmd/engine/wire.py, one connection per request: nothing here is hot enough
for keep-alive to matter), then judge them (llmd/releases/smoke.py).

Golden prompts run greedy (temperature 0) so a release answers the same way each time, and one
at a time so the latency bound measures the engine, not the queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmd.endpoints.openai import read_chat, read_completions
from llmd.engine.wire import Answer, Pool
from llmd.releases.golden import FIXED_CHAT, FIXED_TEXTS, GoldenPrompt
from llmd.releases.smoke import (
    GoldenAnswer,
    SmokeExpectations,
    SmokeObservations,
    SmokeReport,
    TokenCount,
    judge,
)
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import as_counted

_POLL_S = 0.2
_SMALL_TIMEOUT_S = 10.0


async def wait_healthy(
    socket: Path, timeout_s: float, alive: Callable[[], bool] = lambda: True
) -> float | None:
    """Poll `GET /health` until 200; the seconds it took, or None after `timeout_s` or once
    `alive()` says the engine process is gone."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if not alive():
            return None
        try:
            if (await _once(socket, "GET", "/health", b"", {}, 2.0)).status == 200:
                return time.monotonic() - began
        except (TimeoutError, OSError):
            pass
        await asyncio.sleep(_POLL_S)
    return None


async def run_smoke(
    socket: Path,
    expected: SmokeExpectations,
    *,
    boot_s: float | None,
    counter: LocalCounter | None,
    golden: Sequence[GoldenPrompt],
    max_tokens: int,
    engine_log_tail: str = "",
    headers: Mapping[str, str] | None = None,
) -> SmokeReport:
    """Observe the engine on `socket` (unless it did not boot) and judge it. `counter` is the
    local tokenizer llmd will count this release's prompts with (None: llmd asks the engine);
    `headers` go with every request (the engine's API key: llmd/engine/args.py)."""
    if boot_s is None or boot_s > expected.boot_timeout_s:
        return judge(SmokeObservations(boot_s=boot_s), expected, engine_log_tail)
    seen = await observe(
        socket,
        expected.served_model_name,
        boot_s=boot_s,
        counter=counter,
        golden=golden,
        max_tokens=max_tokens,
        request_timeout_s=expected.latency_s * 2 + 5,
        headers=headers,
    )
    return judge(seen, expected, engine_log_tail)


async def observe(
    socket: Path,
    model: str,
    *,
    boot_s: float,
    counter: LocalCounter | None,
    golden: Sequence[GoldenPrompt],
    max_tokens: int,
    request_timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> SmokeObservations:
    """Read /v1/models, count the fixed texts both ways, run the golden prompts (each request
    with `headers`)."""
    engine = _Engine(socket, dict(headers or {}))
    served, max_model_len = await _models(engine)
    counts = [await _count(engine, model, counter, label, text) for label, text in FIXED_TEXTS]
    counts.append(await _count(engine, model, counter, "chat", None))
    answers = [
        await _golden(engine, model, prompt, max_tokens, request_timeout_s) for prompt in golden
    ]
    return SmokeObservations(
        boot_s=boot_s,
        served_models=served,
        max_model_len=max_model_len,
        token_counts=tuple(counts),
        golden=tuple(answers),
    )


async def golden_answers(
    socket: Path,
    model: str,
    golden: Sequence[GoldenPrompt],
    *,
    max_tokens: int,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> tuple[GoldenAnswer, ...]:
    """The engine's greedy answers to `golden` (one at a time, each with its token ids), as
    the smoke gate asks them: what `llmd tune --variants` compares between engine settings."""
    engine = _Engine(socket, dict(headers or {}))
    return tuple([await _golden(engine, model, p, max_tokens, timeout_s) for p in golden])


async def _models(engine: _Engine) -> tuple[tuple[str, ...], int | None]:
    try:
        answer = await _call(engine, "GET", "/v1/models", None, _SMALL_TIMEOUT_S)
    except _Failed:
        return (), None
    models = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(models, list):
        return (), None
    names = tuple(str(m.get("id")) for m in models if isinstance(m, dict))
    lengths = [m.get("max_model_len") for m in models if isinstance(m, dict)]
    length = lengths[0] if lengths and isinstance(lengths[0], int) else None
    return names, length


async def _count(
    engine: _Engine, model: str, counter: LocalCounter | None, label: str, text: str | None
) -> TokenCount:
    """`text` as a completion prompt, or FIXED_CHAT as a chat when `text` is None."""
    if text is None:
        body: dict[str, Any] = {"model": model, "messages": list(FIXED_CHAT)}
        prompt = as_counted(read_chat(body).prompt)
        tokenize = {**body, "add_generation_prompt": True}
    else:
        body = {"model": model, "prompt": text}
        prompt = as_counted(read_completions(body).prompt)
        tokenize = body
    local = None
    if counter is not None and counter.can_count(prompt):
        local = (await counter.count(prompt))[0]
    try:
        answer = await _call(engine, "POST", "/tokenize", tokenize, _SMALL_TIMEOUT_S)
    except _Failed as exc:
        return TokenCount(label, local, None, f"/tokenize failed: {exc}")
    count = answer.get("count") if isinstance(answer, dict) else None
    if not isinstance(count, int):
        return TokenCount(label, local, None, f"/tokenize answered {answer!r:.200}")
    return TokenCount(label, local, count)


async def _golden(
    engine: _Engine, model: str, prompt: GoldenPrompt, max_tokens: int, timeout_s: float
) -> GoldenAnswer:
    body = {
        "model": model,
        "messages": list(prompt.messages),
        "max_tokens": prompt.max_tokens or max_tokens,
        "temperature": 0,
    }
    began = time.monotonic()
    try:
        answer = await _call(engine, "POST", "/v1/chat/completions", body, timeout_s)
    except _Failed as exc:
        return GoldenAnswer(prompt.label, "", (), time.monotonic() - began, error=str(exc))
    latency = time.monotonic() - began
    try:
        choice = answer["choices"][0]
        text = choice["message"]["content"] or ""
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError):
        return GoldenAnswer(prompt.label, "", (), latency, error=f"answered {answer!r:.200}")
    ids: tuple[int, ...] = ()
    if text.strip():
        tokenize = {"model": model, "prompt": text, "add_special_tokens": False}
        try:
            tokens = await _call(engine, "POST", "/tokenize", tokenize, _SMALL_TIMEOUT_S)
            ids = tuple(tokens.get("tokens") or ())
        except _Failed as exc:
            return GoldenAnswer(prompt.label, text, (), latency, finish, f"/tokenize: {exc}")
    return GoldenAnswer(prompt.label, text, ids, latency, finish)


class _Failed(Exception):
    """A call to the engine failed: connection, timeout, non-200, not JSON."""


@dataclasses.dataclass(frozen=True)
class _Engine:
    """The engine's Unix socket and the headers each request to it carries."""

    socket: Path
    headers: dict[str, str]


async def _call(
    engine: _Engine,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    timeout_s: float,
) -> Any:
    data = b"" if body is None else json.dumps(body).encode()
    headers = {**engine.headers, "content-type": "application/json"}
    try:
        answer = await _once(engine.socket, method, path, data, headers, timeout_s)
    except TimeoutError as exc:
        raise _Failed(f"no answer within {timeout_s:g} s") from exc
    except OSError as exc:
        raise _Failed(f"{type(exc).__name__}: {exc}") from exc
    if answer.status != 200:
        raise _Failed(f"HTTP {answer.status}: {answer.text()[:200]}")
    try:
        return answer.json()
    except ValueError as exc:
        raise _Failed(f"not JSON: {answer.body[:200]!r}") from exc


async def _once(
    socket: Path,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
) -> Answer:
    """One request on a new connection to `socket`, closed after its answer. Raises
    ConnectFailed, ConnectionLost (OSErrors), TimeoutError."""
    pool = Pool(socket_path=socket)
    try:
        return await pool.fetch(method, path, body, headers, timeout_s=timeout_s)
    finally:
        pool.close()
