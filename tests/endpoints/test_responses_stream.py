"""A Responses answer read as it passes: tokens, usage, finish reason and the end of a stream;
the response object kept for the store however the bytes are cut; the in-band error event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmd.endpoints.responses_stream import ResponsesAnswer, error_event
from llmd.errors import EngineError
from llmd.inflight import Exchange

USAGE = {
    "input_tokens": 7,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0},
    "total_tokens": 10,
}


def final(status: str = "completed", text: str = 'ab "c"\n\n') -> dict[str, Any]:
    """A finished response object, as vLLM 0.32 dumps its fields (a text with quotes and
    blank lines, which JSON escapes)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    message = {"id": "msg_1", "content": [{"type": "output_text", "text": text}], "type": "message"}
    return {
        "id": "resp_1",
        "incomplete_details": incomplete,
        "max_output_tokens": 16,
        "object": "response",
        "output": [message],
        "status": status,
        "usage": USAGE,
    }


def event(kind: str, sequence: int, **fields: Any) -> bytes:
    data = {**fields, "sequence_number": sequence, "type": kind}
    return (
        f"event: {kind}\ndata: ".encode()
        + json.dumps(data, separators=(",", ":")).encode()
        + b"\n\n"
    )


def stream(status: str = "completed") -> list[bytes]:
    """One chunk per event, as vLLM writes them: created, three deltas, completed."""
    chunks = [event("response.created", 0, response={"id": "resp_1", "status": "in_progress"})]
    chunks += [event("response.output_text.delta", 1 + i, delta=d) for i, d in enumerate("abc")]
    chunks.append(event("response.completed", 4, response=final(status)))
    return chunks


def read(chunks: list[bytes], *, stream_: bool = True, keep: bool = True) -> ResponsesAnswer:
    answer = ResponsesAnswer(Exchange("r1", stream_), keep=keep)
    for index, chunk in enumerate(chunks):
        answer.feed(chunk, last=index == len(chunks) - 1)
    return answer


def test_a_stream_is_counted_by_its_deltas_then_its_usage() -> None:
    """Each delta event counts a token until the last event's usage gives the engine's own
    count; the stream is answered (its last event went out) with finish reason stop."""
    chunks = stream()
    answer = read(chunks[:-1])
    exchange = answer.exchange
    assert exchange.output_tokens == 3 and not answer.done and exchange.has_text
    assert exchange.first_byte_at is not None
    answer.feed(chunks[-1])
    assert exchange.output_tokens == USAGE["output_tokens"] and answer.done
    assert exchange.finish_reason == "stop" and answer.sequence == 4


def test_an_incomplete_response_finishes_with_length() -> None:
    """A response cut by max_output_tokens (vLLM ends it with response.completed whose status
    is incomplete) is finish reason `length`, streamed or whole."""
    assert read(stream("incomplete")).exchange.finish_reason == "length"
    whole = json.dumps(final("incomplete")).encode()
    assert read([whole], stream_=False).exchange.finish_reason == "length"


def test_a_whole_answer_is_kept_and_counted() -> None:
    """A non-streamed answer: its usage's output tokens; kept as the object it is."""
    answer = read([json.dumps(final()).encode()], stream_=False)
    assert answer.response == final() and answer.exchange.output_tokens == 3


@pytest.mark.parametrize("cut", [1, 2, 7, 64, 1000])
def test_the_last_events_response_is_kept_however_the_bytes_are_cut(cut: int) -> None:
    """The stream's bytes sent in pieces of any size (an event, and its blank line, split
    across pieces): the completed event's response is kept whole, and only it."""
    data = b"".join(stream())
    pieces = [data[i : i + cut] for i in range(0, len(data), cut)]
    answer = read(pieces)
    assert answer.response == final()


def relayout(chunks: list[bytes], *, typed: bool) -> bytes:
    """The events as another valid event stream writes them (WHATWG HTML §9.2.6): CRLF line
    endings, a comment before each event, `data:` without its space and over two lines, and
    the `event:` field only when `typed`."""
    out = []
    for chunk in chunks:
        head, _, data = chunk[:-2].partition(b"\ndata: ")
        out.append(b": keep-alive\r\n")
        if typed:
            out.append(head + b"\r\n")
        out.append(b"data:" + data[:1] + b"\r\ndata:" + data[1:] + b"\r\n\r\n")
    return b"".join(out)


@pytest.mark.parametrize("typed", [True, False])
@pytest.mark.parametrize("cut", [1, 3, 50])
def test_any_layout_the_grammar_allows_is_read_alike(typed: bool, cut: int) -> None:
    """The events are read by the shared SSE parser: CRLF, comments, split data lines, no
    `event:` field (the type then read from the data), bytes cut anywhere: the same tokens,
    usage, end, sequence and kept response as vLLM's own layout."""
    data = relayout(stream("incomplete"), typed=typed)
    answer = read([data[i : i + cut] for i in range(0, len(data), cut)])
    assert answer.done and answer.sequence == 4 and answer.response == final("incomplete")
    assert answer.exchange.output_tokens == 3 and answer.exchange.finish_reason == "length"
    assert read(stream()[:3]).between_events and not read(stream()[:-1]).done


@pytest.mark.parametrize("typed", [True, False])
def test_a_text_that_names_an_event_type_is_not_one(typed: bool) -> None:
    """A delta whose text reads like a last event's type neither ends the stream nor counts
    twice, with or without `event:` fields: JSON escapes its quotes."""
    tricky = event("response.output_text.delta", 1, delta='"type":"response.completed" x.delta"')
    answer = read([relayout([stream()[0], tricky], typed=typed)])
    assert not answer.done and answer.exchange.output_tokens == 1


def test_nothing_is_kept_unless_asked() -> None:
    """Without `keep` the response is not parsed or held."""
    assert read(stream(), keep=False).response is None
    assert read([json.dumps(final()).encode()], stream_=False, keep=False).response is None


def test_the_error_event_follows_the_last_sequence_number() -> None:
    """An error after the first byte is the Responses stream's `error` event (OpenAI
    ResponseErrorEvent: type, code, message, param, sequence_number), numbered after the last
    event sent."""
    answer = read(stream()[:2])
    raw = answer.error_event(EngineError("the engine failed"))
    head, _, data = raw.partition(b"\ndata: ")
    assert head == b"event: error" and raw.endswith(b"\n\n")
    assert json.loads(data) == {
        "type": "error",
        "code": "engine_error",
        "message": "the engine failed",
        "param": None,
        "sequence_number": 2,
    }
    assert error_event(EngineError("x"), 0).startswith(b"event: error\n")
