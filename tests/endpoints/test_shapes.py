"""A stream's token events read by their shape (llmd/endpoints/shapes.py): exactly as the
reference reads each event (`OpenAIAnswer.event`), whatever the texts hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.endpoints.dialects import OpenAIAnswer
from llmd.endpoints.events import EventStream
from llmd.endpoints.shapes import TokenShape
from llmd.inflight import Exchange
from tests.endpoints.test_events import RUN_DATA, read_in_pieces, what_was_read

# Token events as vLLM 0.32 lays them out (one choice of several included), less the text.
SHAPES = [
    (b'{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,'
     b'"text":"', b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}'),
    (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
     b'[{"index":0,"delta":{"content":"', b'"},"logprobs":null,"finish_reason":null}]}'),
    (b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":'
     b'[{"index":1,"delta":{"content":"', b'"},"logprobs":null,"finish_reason":null}]}'),
    (b'{"choices":[{"delta":{"reasoning_content":"', b'"},"finish_reason":null}]}'),
    (b'{"choices":[{"delta":{"content":"', b'","reasoning_content":null},"finish_reason":null}]}'),
]  # fmt: skip
# Bytes a text may hold, what JSON allows and what it does not: escaped quotes and
# backslashes, a lone backslash, a raw quote, line breaks, keys the reference looks for,
# what ends a value, UTF-8.
TEXT = st.lists(
    st.sampled_from(
        [b"", b"a", b" the", b'\\"', b"\\\\", b"\\", b'"', b"role", b"error", b"finish_reason",
         b"completion_tokens", b'\\"role\\"', b'\\"role', b"\n", b"\r", b'",', b'"}', b":",
         b"\xc3\xa9", b"\\n", b"null", b"[DONE]", b'\\":\\"stop'],
    ),
    max_size=4,
).map(b"".join)  # fmt: skip
TOKEN = st.tuples(st.sampled_from(SHAPES), TEXT).map(lambda p: p[0][0] + p[1] + p[0][1])
# Mostly token events of a few shapes, with any other event between them.
DATA = st.lists(st.one_of(TOKEN, TOKEN, TOKEN, RUN_DATA), max_size=40)


def read_one_by_one(data: list[bytes]) -> tuple[Exchange, bool]:
    """The reference: the stream's events as the WHATWG grammar reads them (a line break in
    a text ends its line), each read by `OpenAIAnswer.event`."""
    exchange = Exchange("e", stream=True)
    answer = OpenAIAnswer(exchange)
    events = EventStream()
    for _, d in events.feed(b"".join(b"data: " + d + b"\n\n" for d in data)):
        answer.event(d)
    return exchange, events.done


@settings(max_examples=300, deadline=None)
@given(DATA, st.lists(st.integers(1, 6), max_size=40))
def test_runs_of_token_events_read_as_one_event_at_a_time(
    data: list[bytes], runs: list[int]
) -> None:
    """Events in chunks of a few whole ones (as one read of the engine's socket brings them)
    read as the reference reads them one at a time: tokens, finish reason, text, end."""
    events = [b"data: " + d + b"\n\n" for d in data]
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    at = 0
    for size in [*runs, len(events)]:
        if at < len(events):
            answer.feed(b"".join(events[at : at + size]))
            at += size
    expected, done = read_one_by_one(data)
    assert what_was_read(exchange) == what_was_read(expected)
    assert answer.done == done
    assert answer.between_events


@settings(max_examples=200, deadline=None)
@given(DATA, st.lists(st.integers(0, 8000), max_size=10))
def test_token_events_cut_anywhere_read_as_one_event_at_a_time(
    data: list[bytes], cuts: list[int]
) -> None:
    """The same events cut at any byte read as the reference reads them."""
    exchange, answer = read_in_pieces(b"".join(b"data: " + d + b"\n\n" for d in data), cuts)
    expected, done = read_one_by_one(data)
    assert what_was_read(exchange) == what_was_read(expected)
    assert answer.done == done


def event(text: bytes, shape: int = 0) -> bytes:
    head, tail = SHAPES[shape]
    return b"data: " + head + text + tail + b"\n\n"


def test_a_shape_reads_events_that_differ_only_in_their_text() -> None:
    shape = TokenShape.of(event(b"a"))
    assert shape is not None
    assert shape.head.endswith(b'"text":"') and shape.tail.startswith(b'","logprobs"')
    run = event(b" the") + event(b"") + event(b'say \\"hi\\" \\\\') + event(b"\\u00e9")
    assert shape.read(run) == (4, True, len(run), False)
    assert shape.read(event(b"") * 2) == (2, False, 2 * len(event(b"")), False)
    ended = event(b"b") + b"data: [DONE]\n\n"
    assert shape.read(ended) == (1, True, len(ended), True)


def test_a_shape_stops_at_the_first_event_not_of_it() -> None:
    shape = TokenShape.of(event(b"a"))
    assert shape is not None
    first = event(b"x")
    for other in (
        event(b"a", shape=2),  # another choice's events
        event(b"a")[:-1],  # cut short
        event(b'a"'),  # a quote that ends the text early
        event(b"a\\"),  # a backslash that escapes the closing quote
        event(b"line\nbreak"),
        event(b"cr\r"),
        b"data: [DONE]\n\n" + event(b"a"),  # [DONE] ends a stream
        event(b"a") + b": comment\n\n",
        event(b"a").replace(b'"finish_reason":null', b'"finish_reason":"stop"'),
    ):
        read = shape.read(other)
        assert read[2] < len(other), other
        assert shape.read(first + other) == (1 + read[0], True, len(first) + read[2], False)


def test_no_shape_without_a_text_value_a_shape_can_hold() -> None:
    assert TokenShape.of(b'data: {"choices":[{"delta":{},"finish_reason":null}]}\n\n') is None
    assert TokenShape.of(b'data: {"x":"\\"text\\":\\"a"}\n\n') is None
    assert TokenShape.of(b'data: {"text":"a":1}\n\n') is None  # not a value's end


def spy_on_shapes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool, int] | None]:
    """What each `EventStream.feed_shaped` call returns, in order."""
    shaped: list[tuple[int, bool, int] | None] = []
    feed_shaped = EventStream.feed_shaped

    def spy(self: EventStream, chunk: bytes, shape: TokenShape) -> tuple[int, bool, int] | None:
        shaped.append(feed_shaped(self, chunk, shape))
        return shaped[-1]

    monkeypatch.setattr(EventStream, "feed_shaped", spy)
    return shaped


def test_a_vllm_stream_is_read_by_its_shape_from_its_first_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every chunk of token events is read by the shape, the first included; a chunk's
    finish event and [DONE] are read after them as before."""
    shaped = spy_on_shapes(monkeypatch)
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    answer.feed(event(b"first"))
    for n in range(1, 20):
        answer.feed(b"".join(event(b"t%d" % i) for i in range(n % 4 + 1)))
    last = event(b"x").replace(b'"finish_reason":null', b'"finish_reason":"length"')
    answer.feed(event(b"y") * 3 + last + b"data: [DONE]\n\n")
    assert all(read is not None for read in shaped) and len(shaped) == 21
    assert shaped[-1] == (3, True, 3 * len(event(b"y")))
    tokens = 1 + sum(n % 4 + 1 for n in range(1, 20)) + 3 + 1
    assert what_was_read(exchange) == (tokens, "length", True)
    assert answer.done


def test_a_chat_stream_learns_its_shape_past_the_role_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shaped = spy_on_shapes(monkeypatch)
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    answer.feed(role + event(b"a", shape=1) + event(b"b", shape=1))
    assert shaped == [None]  # the role delta first: the shape reads nothing yet
    answer.feed(event(b"c", shape=1))
    assert shaped[-1] == (1, True, len(event(b"c", shape=1)))
    assert what_was_read(exchange) == (3, None, True)
