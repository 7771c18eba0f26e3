"""The client writer: the SSE tail judged across chunk boundaries, errors in-band or whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llmd.endpoints.dialects import ANTHROPIC
from llmd.errors import EngineError, EngineStalled
from llmd.inflight import Exchange
from llmd.proxy.writer import ClientWriter, answer_error


class Sent:
    """An ASGI `send` that keeps every message."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if "body" in m)


async def test_an_event_end_split_across_chunks_counts_as_between_events() -> None:
    """`data: ...\\n` then `\\n` in the next chunk ends the event: the stream may end there."""
    writer = ClientWriter(Sent(), Exchange("r", stream=True))
    await writer.start(200, [])
    await writer.body(b'data: {"x": 1}\n', more=True)
    assert not writer.between_events
    await writer.body(b"\n", more=True)
    assert writer.between_events


async def test_an_in_band_error_after_a_partial_event_starts_a_new_event() -> None:
    """An error after half an event closes that event first, then sends the error and [DONE]."""
    sent = Sent()
    writer = ClientWriter(sent, Exchange("r", stream=True))
    await writer.start(200, [])
    await writer.body(b"data: {", more=True)
    await answer_error(writer, EngineError("boom"))
    events = [e for e in sent.body().split(b"\n\n") if e]
    assert events[0] == b"data: {"
    assert json.loads(events[1].removeprefix(b"data: "))["error"]["code"] == "engine_error"
    assert events[2] == b"data: [DONE]" and sent.messages[-1]["more_body"] is False


async def test_an_error_before_the_start_is_a_whole_response() -> None:
    """Before any byte went out, an error is an OpenAI-shaped response with its status."""
    sent = Sent()
    exchange = Exchange("r", stream=True)
    await answer_error(ClientWriter(sent, exchange), EngineError("boom"))
    assert sent.messages[0]["status"] == 502 and exchange.status == 502
    assert json.loads(sent.body())["error"]["code"] == "engine_error"


async def test_the_body_goes_to_the_body_send_and_the_notes_on_the_start() -> None:
    """The start (with the notes, those added after the writer was made included) goes to
    `send`, every body message to `body_send`; an error before the start carries the notes."""
    sent, bodies = Sent(), Sent()
    notes = [(b"x-llmd-max-tokens-clamped", b"8")]
    writer = ClientWriter(sent, Exchange("r", stream=True), notes, body_send=bodies)
    notes.append((b"x-llmd-max-tokens-capped", b"4"))
    await writer.start(200, [(b"content-type", b"text/event-stream")])
    await writer.body(b"data: {}\n\n", more=True)
    await writer.body(b"", more=False)
    assert [m["type"] for m in sent.messages] == ["http.response.start"]
    assert sent.messages[0]["headers"] == [(b"content-type", b"text/event-stream"), *notes]
    assert bodies.body() == b"data: {}\n\n" and bodies.messages[-1]["more_body"] is False
    refused = Sent()
    await answer_error(ClientWriter(refused, Exchange("s", stream=True), notes), EngineError("x"))
    assert set(notes) <= set(refused.messages[0]["headers"])


async def test_a_stream_in_another_layout_ends_answered_and_between_events() -> None:
    """A stream written with CRLF, `data:` unspaced and comments ends between events once its
    `[DONE]` event's blank line went out (its CR ends it: the LF after belongs to it), and the
    exchange is answered: nothing to append."""
    writer = ClientWriter(Sent(), Exchange("r", stream=True))
    await writer.start(200, [])
    await writer.body(b': hi\r\ndata:{"choices":[{"delta":{"content":"a"}}]}\r\n\r\n', more=True)
    await writer.body(b"data:[DONE]\r\n\r", more=True)
    assert writer.exchange.answered and writer.between_events
    await writer.body(b"\n", more=True)
    assert writer.exchange.answered and writer.between_events


async def test_an_anthropic_stream_ends_with_an_error_event_and_no_done() -> None:
    """On a Messages stream an in-band error (the watchdog's engine_stalled) is an
    `event: error` in Anthropic's shape after the half-sent event is closed, and no
    `[DONE]`; before the start it is a whole Anthropic-shaped 503 with Retry-After."""
    sent = Sent()
    writer = ClientWriter(sent, Exchange("r", stream=True), dialect=ANTHROPIC)
    await writer.start(200, [])
    await writer.body(b'event: content_block_delta\ndata: {"type"', more=True)
    await answer_error(writer, EngineStalled("the engine made no progress", retry_after_s=2))
    events = [e for e in sent.body().split(b"\n\n") if e]
    assert events[-1].startswith(b"event: error\ndata: ") and b"[DONE]" not in sent.body()
    error = json.loads(events[-1].split(b"data: ", 1)[1])
    assert error == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "the engine made no progress"},
    }
    assert sent.messages[-1]["more_body"] is False
    whole = Sent()
    exchange = Exchange("w", stream=True)
    await answer_error(ClientWriter(whole, exchange, dialect=ANTHROPIC), EngineStalled("x"))
    assert whole.messages[0]["status"] == 503
    assert (b"retry-after", b"1") in whole.messages[0]["headers"]
    assert json.loads(whole.body())["error"]["type"] == "overloaded_error"


class HeldSend(Sent):
    """An ASGI `send` whose body sends wait until `release` is set (a client not reading)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.body":
            self.waiting.set()
            await self.release.wait()
        await super().__call__(message)


async def test_a_send_that_waits_for_the_client_is_told_to_the_watchdog() -> None:
    """While a send waits for the client the exchange says since when (`send_since`: the
    watchdog holds it neither busy nor idle); once it returns, `resumed_at` says when llmd
    reads the backend again."""
    sent = HeldSend()
    exchange = Exchange("r", stream=True)
    writer = ClientWriter(sent, exchange)
    await writer.start(200, [])
    sending = asyncio.create_task(writer.body(b'data: {"x": 1}\n\n', more=True))
    await sent.waiting.wait()
    assert exchange.send_since is not None and exchange.progress_at is not None
    waited_from = exchange.send_since
    sent.release.set()
    await sending
    assert exchange.send_since is None
    assert exchange.resumed_at is not None and exchange.resumed_at >= waited_from
