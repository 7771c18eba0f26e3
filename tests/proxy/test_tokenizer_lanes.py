"""A long tokenization never holds up a short one: a long body is counted on a lane of its own
(llmd's tokenizer) and takes one engine /tokenize slot at most; a prompt whose text cannot fit
the context is refused untokenized, on the engine's path too (a chat with tools)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmd.validation.counter import LocalCounter
from llmd.validation.fields import TextPrompt
from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.waiting import until
from tests.validation.conftest import make_tokenizer_dir

# The tiny model's way with tools (scripts/make_tiny_model.py): each tool as JSON, then the turns.
TOOLS_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|system|>\n{% for tool in tools %}{{ tool | tojson }}\n"
    "{% endfor %}{{ eos_token }}\n{% endif %}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LONG_TEXT = "a " * 60_000  # a body of 120 KB: a long one


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer_dir(tmp_path_factory.mktemp("model"), TOOLS_TEMPLATE)


def chat(text: str, **more: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    return {**body, **more}


def tools(count: int) -> list[dict[str, Any]]:
    """One tool of `count` properties, each with a description of 100 characters."""
    properties = {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(count)}
    parameters = {"type": "object", "properties": properties}
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@contextlib.contextmanager
def long_ids_held(
    counter: LocalCounter, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """While the block runs, the tokenizer's ids of a text as long as LONG_TEXT wait (on the
    thread tokenizing them) until the second event yielded is set; the first is set once one
    waits. Both set when the block ends."""
    entered, release = threading.Event(), threading.Event()
    original = counter._ids

    def held(*args: Any) -> list[int]:
        if any(isinstance(a, TextPrompt) and a.prompts[0] == LONG_TEXT for a in args):
            entered.set()
            release.wait(60)
        return original(*args)

    monkeypatch.setattr(counter, "_ids", held)
    try:
        yield entered, release
    finally:
        release.set()


async def test_a_short_chat_is_validated_while_a_long_tokenize_runs(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A /tokenize of 120 KB is tokenized in full (vLLM counts past the window too) while a
    chat of 2 KB sent after it is counted and answered: the chat ends first."""
    engine = FakeEngine()
    with ProxyStack.run(model, tmp_path, 1024, engine=engine) as running:
        counter = running.ctx.validators.for_model("tiny").local
        assert counter is not None
        expected = counter.count_now(TextPrompt([LONG_TEXT], True))[0]
        ended: list[str] = []
        async with httpx.AsyncClient(base_url=running.base_url, timeout=60) as client:

            async def send(path: str, body: dict[str, Any], name: str) -> httpx.Response:
                answer = await client.post(path, json=body)
                ended.append(name)
                return answer

            with long_ids_held(counter, monkeypatch) as (entered, release):
                body = {"model": "tiny", "prompt": LONG_TEXT}
                long = asyncio.create_task(send("/tokenize", body, "tokenize"))
                assert await until(entered.is_set, timeout_s=30)
                short = asyncio.create_task(
                    send("/v1/chat/completions", chat("fox " * 500), "chat")
                )
                await until(short.done, timeout_s=30)  # on main it waits for the tokenize
                release.set()
                answers = await asyncio.gather(long, short)
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json()["count"] == expected > 1024
    assert ended == ["chat", "tokenize"]


async def test_tools_that_cannot_fit_are_refused_before_the_engine_counts_them(
    model: Path, tmp_path: Path
) -> None:
    """A chat whose tools render (as vLLM renders them) to more characters than 1024 tokens
    could cover is refused 400 "at least N tokens" without a /tokenize call; a short chat
    with small tools is still counted by the engine."""
    engine = FakeEngine()
    with ProxyStack.run(model, tmp_path, 1024, engine=engine) as running:
        async with httpx.AsyncClient(base_url=running.base_url, timeout=60) as client:
            huge = await client.post("/v1/chat/completions", json=chat("hi", tools=tools(2000)))
            assert engine.tokenized == []
            small = await client.post("/v1/chat/completions", json=chat("hi", tools=tools(1)))
    error = huge.json()["error"]
    assert huge.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "at least" in error["message"]
    assert small.status_code == 200 and len(engine.tokenized) == 1


async def test_long_engine_counts_leave_the_other_tokenize_slots_to_short_ones(
    model: Path, tmp_path: Path
) -> None:
    """Two long chats the engine counts (tools that may fit) and two /tokenize slots: one long
    count runs, the other waits, and a short chat sent after them is counted meanwhile."""
    engine = FakeEngine()
    with (
        ProxyStack.run(model, tmp_path, 10**9, engine=engine, max_tokenize_calls=2) as running,
        _tokenize_held(engine) as hold,
    ):
        async with httpx.AsyncClient(base_url=running.base_url, timeout=60) as client:
            path = "/v1/chat/completions"
            longs = [
                asyncio.create_task(client.post(path, json=chat(f"long {i}", tools=tools(1000))))
                for i in range(2)
            ]
            assert await until(lambda: len(engine.tokenized) == 1, timeout_s=30)
            short = asyncio.create_task(client.post(path, json=chat("short", tools=tools(1))))
            counted = lambda: any(b["messages"][0]["content"] == "short" for b in engine.tokenized)  # noqa: E731
            assert await until(counted, timeout_s=30)
            hold.set()
            answers = await asyncio.gather(*longs, short)
    assert [a.status_code for a in answers] == [200] * 3
    assert [b["messages"][0]["content"] for b in engine.tokenized][1] == "short"


@contextlib.contextmanager
def _tokenize_held(engine: FakeEngine) -> Iterator[threading.Event]:
    """The engine's /tokenize calls wait until the event yielded is set (at the latest when
    the block ends)."""
    engine.tokenize_hold = hold = threading.Event()
    try:
        yield hold
    finally:
        hold.set()
