"""The server-sent events reader against a reference written from the WHATWG text (HTML §9.2.6),
on streams in every layout the grammar allows, fed whole, split at every byte boundary, and
split anywhere at once; and what an OpenAI stream tells llmd, the same in every layout."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.endpoints.dialects import OpenAIAnswer
from llmd.endpoints.events import BOM, Event, EventStream
from llmd.inflight import Exchange


def reference(stream: bytes) -> tuple[list[Event], bool, bool]:
    """The events of `stream` as the spec's algorithm dispatches them, whether the stream
    ends between events (at a line's start, no data or event field waiting), and whether an
    event whose data starts with `[DONE]` was dispatched. Written from the spec's words, one
    character at a time, with no regard for speed."""
    text = stream.decode()
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    line, i = "", 0
    while i < len(text):
        char = text[i]
        if char in "\r\n":
            lines.append(line)
            line = ""
            if char == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        else:
            line += char
        i += 1
    events: list[Event] = []
    data, event_type, pending, done = "", "", False, False
    for one in lines:
        if one == "":
            if data:
                payload = data[:-1] if data.endswith("\n") else data
                events.append((event_type.encode(), payload.encode()))
                done = done or payload.startswith("[DONE]")
            data, event_type, pending = "", "", False
            continue
        if one.startswith(":"):
            continue
        if ":" in one:
            name, value = one.split(":", 1)
            value = value[1:] if value.startswith(" ") else value
        else:
            name, value = one, ""
        if name == "data":
            data += value + "\n"
            pending = True
        elif name == "event":
            event_type = value
            pending = True
    return events, line == "" and not pending, done


def parse(pieces: list[bytes]) -> tuple[list[Event], bool, bool]:
    reader = EventStream()
    events = [event for piece in pieces for event in reader.feed(piece)]
    return events, reader.between_events, reader.done


# Pieces from which streams are made: every field, line ending and spacing the grammar allows.
TOKENS = st.sampled_from(
    ["data", "data:", "data: ", ":", " ", "\r", "\n", "\r\n", "event", "event: ping", "id: 7",
     "retry: 10", "x", "{", '"a":1', "}", "[DONE]", "é", "\ufeff", "dat", "data:data",
     "event: t\ndata: ", "\n\n"]
)  # fmt: skip
STREAMS = st.builds(
    lambda bom, tokens: (BOM if bom else b"") + "".join(tokens).encode(),
    st.booleans(),
    st.lists(TOKENS, max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(STREAMS)
def test_every_split_point_reads_as_the_reference(stream: bytes) -> None:
    """Whole, and cut in two at each byte boundary, a stream gives the reference's events,
    end state and [DONE]."""
    expected = reference(stream)
    assert parse([stream]) == expected
    for cut in range(len(stream) + 1):
        assert parse([stream[:cut], stream[cut:]]) == expected, cut


@settings(max_examples=300, deadline=None)
@given(STREAMS, st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_chunking_reads_as_the_reference(stream: bytes, cuts: list[int]) -> None:
    """Cut at many points at once (one byte per chunk included), a stream still reads as the
    reference reads it."""
    points = sorted({min(cut, len(stream)) for cut in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert parse(pieces) == reference(stream)
    assert parse([bytes([b]) for b in stream]) == reference(stream)


# An OpenAI chat stream as vLLM writes its events' data (role, text, finish, usage).
CHAT_EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    *({"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in "abc"),
    {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
]


def layout(data: list[bytes], ending: str, space: bool, comment: bool, ids: bool, split: bool,
           event: bool, bom: bool) -> bytes:  # fmt: skip
    """`data` written as server-sent events in the layout the flags choose."""
    end = ending.encode()
    out = [BOM] if bom else []
    for number, payload in enumerate(data):
        if comment:
            out.append(b": keep-alive" + end)
        if ids:
            out.append(b"id: " + str(number).encode() + end)
        if event:
            out.append(b"event: message" + end)
        prefix = b"data: " if space else b"data:"
        parts = payload.split(b",") if split and payload.startswith(b"{") else [payload]
        # A JSON object cut after each comma is still JSON once joined with LF.
        lines = [parts[0]] + [b"," + part for part in parts[1:]]
        out.extend(prefix + line + end for line in lines)
        out.append(end)
    return b"".join(out)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["\n", "\r\n", "\r"]), st.booleans(), st.booleans(), st.booleans(),
    st.booleans(), st.booleans(), st.booleans(), st.integers(min_value=1, max_value=7),
)  # fmt: skip
def test_an_openai_stream_reads_the_same_in_every_layout(
    ending: str, space: bool, comment: bool, ids: bool, split: bool, event: bool, bom: bool,
    chunk: int,
) -> None:  # fmt: skip
    """Tokens, usage, finish reason, text and [DONE] are read alike from vLLM's layout and
    from any other (CR, CRLF, `data:` unspaced, comments, `id:` and `event:` fields, data
    over several lines, a BOM), whatever the chunking."""
    data = [json.dumps(e, separators=(",", ":")).encode() for e in CHAT_EVENTS] + [b"[DONE]"]
    stream = layout(data, ending, space, comment, ids, split, event, bom)
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    for start in range(0, len(stream), chunk):
        answer.feed(stream[start : start + chunk])
    assert exchange.output_tokens == 4  # the usage's figure
    assert exchange.finish_reason == "length" and exchange.has_text
    assert answer.done and answer.between_events


def test_tokens_are_counted_one_per_event_without_usage() -> None:
    """Without a usage event, each data object but the role delta and an error is a token."""
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    answer.feed(b'data:{"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n')
    answer.feed(b'data:{"choices":[{"delta":{"content":"a"}}]}\r\n\r\n' * 3)
    answer.feed(b'data: {"error": {"message": "x"}}\r\n\r\ndata: [DONE]\r\n\r\n')
    assert exchange.output_tokens == 3 and answer.done


def test_a_stream_cut_inside_an_event_is_not_between_events() -> None:
    """A data line without its blank line, or an `event:` line alone, leaves an event open;
    a comment or an `id:` alone does not."""
    for open_event in (b"data: {", b"data: {}\r\n", b"event: x\n", b"data: {}\r"):
        reader = EventStream()
        reader.feed(open_event)
        assert not reader.between_events, open_event
    for closed in (b": ping\n", b"id: 3\r\n", b"data: {}\r\n\r\n", b"data: {}\r\r"):
        reader = EventStream()
        reader.feed(closed)
        assert reader.between_events, closed


# Event data an OpenAI stream may carry, odd ones included: the role delta, text, a finish
# reason (null, spaced or not), usage, an error, data that is not an object, an object after
# a space, one cut short, and [DONE].
RUN_DATA = st.sampled_from(
    [b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
     b'{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}',
     b'{"choices":[{"delta":{"content":""},"finish_reason":null}]}',
     b'{"choices":[{"text":"b","finish_reason": null}]}',
     b'{"choices":[{"text":"","finish_reason":"stop"}]}',
     b'{"choices":[{"delta":{},"finish_reason":"length"}]}',
     b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}',
     b'{"error": {"message": "x"}}', b'"just a string"', b' {"text":"c"}', b'{"text":"',
     b'{"content":"role"}', b'{"text":"d","error":null,"finish_reason":null}',
     b'{"choices":[{"text":"e","finish_reason" :"stop"}]}', b'{"text":"\\"role\\""}',
     b"[DONE]"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN_DATA, max_size=30), st.lists(st.integers(0, 3000), max_size=10))
def test_runs_of_events_read_as_one_event_at_a_time(data: list[bytes], cuts: list[int]) -> None:
    """vLLM's layout cut anywhere (whole runs of events in one chunk included) gives the same
    tokens, usage, finish reason, text and end as its events read one at a time."""
    stream = b"".join(b"data: " + d + b"\n\n" for d in data)
    expected = Exchange("e", stream=True)
    one_by_one = OpenAIAnswer(expected)
    for d in data:
        one_by_one.event(d)
    exchange, answer = read_in_pieces(stream, cuts)
    assert what_was_read(exchange) == what_was_read(expected)
    assert answer.done == any(d.startswith(b"[DONE]") for d in data)
    assert answer.between_events


def read_in_pieces(stream: bytes, cuts: list[int]) -> tuple[Exchange, OpenAIAnswer]:
    """`stream` fed to a fresh reader in pieces cut at `cuts` (byte offsets, any order)."""
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    points = sorted({min(cut, len(stream)) for cut in cuts})
    for a, b in zip([0, *points], [*points, len(stream)], strict=True):
        if b > a:
            answer.feed(stream[a:b])
    return exchange, answer


def what_was_read(exchange: Exchange) -> tuple[int, str | None, bool]:
    """What a reader accounts into `exchange`: tokens, finish reason, whether text came."""
    return exchange.output_tokens, exchange.finish_reason, exchange.has_text


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN_DATA, max_size=30))
def test_events_one_a_chunk_read_as_one_event_at_a_time(data: list[bytes]) -> None:
    """vLLM's layout one event a chunk (a plain token read on a fast path, any other event
    as the reference) gives the same tokens, usage, finish reason, text and end as its events
    read one at a time."""
    expected = Exchange("e", stream=True)
    one_by_one = OpenAIAnswer(expected)
    exchange = Exchange("r", stream=True)
    answer = OpenAIAnswer(exchange)
    for d in data:
        one_by_one.event(d)
        answer.feed(b"data: " + d + b"\n\n")
        assert what_was_read(exchange) == what_was_read(expected)
    assert answer.done == any(d.startswith(b"[DONE]") for d in data)
    assert answer.between_events


def test_typed_events_one_a_chunk_read_as_the_reference() -> None:
    """vLLM's Responses layout, `event: TYPE` / `data: ...` one event a chunk (read on a fast
    path), and near misses of it, read as the reference reads them."""
    chunks = [
        b"event: response.created\ndata: {}\n\n",
        b"event: \ndata: \n\n",
        b"event: x\ndata: [DONE]\n\n",
        b"event: x\ndata:{}\n\n",
        b"event: x\ndata: a\ndata: b\n\n",
        b"event: x\r\ndata: y\r\n\r\n",
        b"event: x\nid: 1\n\n",
        b"event: x\ndata: y\n",
    ]
    for chunk in chunks:
        assert parse([chunk]) == reference(chunk), chunk
    stream = b"".join(chunks)
    assert parse(chunks) == reference(stream)


# Typed events in vLLM's layout and near misses of it: an event with no data, one with two
# data lines, a comment, CRLF, an unspaced field, an empty type, data that is [DONE].
TYPED = st.sampled_from(
    [b"event: content_block_delta\ndata: {\"text\":\"a\"}\n\n", b"event: ping\ndata: {}\n\n",
     b"event: \ndata: \n\n", b"event: x\ndata: [DONE]\n\n", b"event: a:b\ndata: c:d\n\n",
     b"event: x\n\n", b"event: x\ndata: a\ndata: b\n\n", b": c\n", b"event: x\r\ndata: y\r\n\r\n",
     b"event:x\ndata:y\n\n", b"data: z\n\n", b"\n"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(TYPED, max_size=12), st.lists(st.integers(0, 400), max_size=8))
def test_runs_of_typed_events_read_as_the_reference(parts: list[bytes], cuts: list[int]) -> None:
    """Runs of `event:`/`data:` events (read at once when whole, `typed_run`) and near misses
    of the layout, whole, cut in two at each byte boundary and cut anywhere, read as the
    reference reads them."""
    stream = b"".join(parts)
    expected = reference(stream)
    assert parse([stream]) == expected
    for cut in range(len(stream) + 1):
        assert parse([stream[:cut], stream[cut:]]) == expected, cut
    points = sorted({min(cut, len(stream)) for cut in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert parse(pieces) == expected


def test_a_typed_run_is_only_vllm_s_layout() -> None:
    """`typed_run` reads whole runs of `event: T\\ndata: D\\n\\n` only: an event without data
    beside one with two data lines (as many lines of each kind), a run cut short, or one
    that starts inside an event are left to `feed`."""
    run = b"event: a\ndata: 1\n\nevent: b\ndata: [DONE]\n\n"
    reader = EventStream()
    assert reader.typed_run(run) == 2 and reader.done and reader.between_events
    assert EventStream().typed_run(b"event: a\n\nevent: b\ndata: 1\ndata: 2\n\n") == 0
    assert EventStream().typed_run(run[:-1]) == 0
    inside = EventStream()
    inside.feed(b"event: a\n")
    assert inside.typed_run(b"event: b\ndata: 1\n\nevent: c\ndata: 2\n\n") == 0
