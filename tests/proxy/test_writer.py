"""The client writer: the SSE tail judged across chunk boundaries, errors in-band or whole."""

from __future__ import annotations

import json
from typing import Any

from llmd.errors import EngineError
from llmd.proxy.inflight import Exchange
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
