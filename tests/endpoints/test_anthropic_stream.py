"""Reading an Anthropic Messages answer as it passes (output tokens, usage, text, the stop
reason, the end at message_stop) in any layout and split anywhere, and Anthropic's error
shape for each status llmd answers."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.endpoints.anthropic_stream import AnthropicAnswer, error_body, error_type, stream_error
from llmd.endpoints.dialects import ANTHROPIC, OPENAI
from llmd.endpoints.table import dialect_of
from llmd.errors import ApiError, EngineStalled, InvalidApiKey, QueueFull
from llmd.inflight import Exchange

# vLLM 0.32's event order for a two-token answer (entrypoints/anthropic/serving.py).
EVENTS = [
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message",
     "role": "assistant", "content": [], "model": "tiny", "stop_reason": None,
     "usage": {"input_tokens": 9, "output_tokens": 0}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
     "content_block": {"type": "text", "text": ""}}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
     "delta": {"type": "text_delta", "text": "he"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
     "delta": {"type": "text_delta", "text": "llo"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
     "usage": {"input_tokens": 9, "output_tokens": 3}}),
    ("message_stop", {"type": "message_stop"}),
]  # fmt: skip


def stream(layout: str = "vllm") -> bytes:
    """EVENTS as SSE: vLLM's layout, CRLF with comments and unspaced fields, or data only."""
    out = []
    for name, data in EVENTS:
        text = json.dumps(data, separators=(",", ":"))
        if layout == "vllm":
            out.append(f"event: {name}\ndata: {text}\n\n")
        elif layout == "crlf":
            out.append(f": keep-alive\r\nevent:{name}\r\ndata:{text}\r\n\r\n")
        else:
            out.append(f"data: {text}\n\n")
    return "".join(out).encode()


def read(body: bytes, cuts: list[int]) -> tuple[Exchange, AnthropicAnswer, list[bool]]:
    """`body` fed in pieces cut at `cuts`; whether the answer was done after each piece."""
    exchange = Exchange("r", stream=True)
    answer = AnthropicAnswer(exchange)
    done = []
    edges = [0, *sorted(set(cuts)), len(body)]
    for start, end in itertools.pairwise(edges):
        answer.feed(body[start:end])
        done.append(answer.done)
    return exchange, answer, done


@given(st.sampled_from(["vllm", "crlf", "data"]), st.lists(st.integers(1, 1500), max_size=6))
def test_a_stream_is_read_the_same_however_it_is_cut(layout: str, cuts: list[int]) -> None:
    """Any layout, any cuts: 3 output tokens (message_delta's usage over the 2 deltas), text,
    finish `length`, done only once message_stop is whole, then between events."""
    body = stream(layout)
    # A line ends at its CR (WHATWG): in CRLF message_stop is whole before the body's last LF.
    whole_at = len(body) - 1 if body.endswith(b"\r\n") else len(body)
    exchange, answer, done = read(body, [c for c in cuts if c < whole_at])
    assert exchange.output_tokens == 3 and exchange.has_text
    assert exchange.finish_reason == "length" and exchange.first_byte_at is not None
    assert done[-1] and not any(done[:-1]) and answer.between_events


def test_deltas_count_until_the_usage_comes_and_a_tool_call_is_text() -> None:
    """Before message_delta each content_block_delta counts one token; a tool_use block is
    output; stop reason tool_use is OpenAI's tool_calls."""
    exchange = Exchange("r", stream=True)
    answer = AnthropicAnswer(exchange)
    answer.feed(stream()[: stream().index(b"event: content_block_stop")])
    assert exchange.output_tokens == 2 and not answer.done
    tools = Exchange("t", stream=True)
    reader = AnthropicAnswer(tools)
    reader.feed(
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"tool_use","id":"t","name":"Read","input":{}}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":'
        b'{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}\n\n'
    )
    assert tools.has_text and tools.finish_reason == "tool_calls" and tools.output_tokens == 7


def test_a_whole_message_gives_its_usage_and_stop_reason() -> None:
    """A non-streamed message: usage.output_tokens, the stop reason, text or not."""
    exchange = Exchange("r", stream=False)
    AnthropicAnswer(exchange).feed(
        b'{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text",'
        b'"text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":4}}'
    )
    assert (exchange.output_tokens, exchange.finish_reason, exchange.has_text) == (4, "stop", True)
    empty = Exchange("e", stream=False)
    AnthropicAnswer(empty).feed(b'{"content":[],"stop_reason":"end_turn","usage":{}}')
    assert not empty.has_text


def test_errors_take_anthropic_s_types_by_status() -> None:
    """401 authentication_error, 429 rate_limit_error, 503 overloaded_error, 500/502
    api_error, 400 invalid_request_error; a stream's error is an `error` event."""
    assert error_type(401) == "authentication_error" and error_type(502) == "api_error"
    assert error_type(400) == "invalid_request_error" and error_type(404) == "not_found_error"
    assert json.loads(error_body(InvalidApiKey("no such key"))) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "no such key"},
    }
    assert json.loads(error_body(QueueFull("full", retry_after_s=1)))["error"]["type"] == (
        "rate_limit_error"
    )
    assert json.loads(error_body(ApiError("bug")))["error"]["type"] == "api_error"
    event = stream_error(EngineStalled("stalled"))
    assert event.startswith(b"event: error\ndata: {") and event.endswith(b"}\n\n")


def test_the_messages_paths_speak_anthropic() -> None:
    """Both Messages paths have the Anthropic dialect (their errors, and the headers passed
    to the engine); every other path, and a path no entry has, OpenAI's."""
    assert dialect_of("/v1/messages") is dialect_of("/v1/messages/count_tokens") is ANTHROPIC
    assert dialect_of("/v1/chat/completions") is dialect_of("/nowhere") is OPENAI
    assert ANTHROPIC.forward_headers == (b"anthropic-version", b"anthropic-beta")


# Anthropic events vLLM 0.32 may send, and odd ones: text and tool deltas, an empty delta,
# ping, block start and stop, usage with its stop reason, the end, an error, an empty type;
# those that come mid-answer drawn more often, so that runs of them are read at once.
DELTA = ("content_block_delta", '{"type":"content_block_delta","delta":{"text":"a"}}')
QUIET = [("ping", '{"type":"ping"}'), ("content_block_stop", '{"type":"content_block_stop"}')]
ODD = [
    ("content_block_delta", '{"type":"content_block_delta","delta":{"text":""}}'),
    ("content_block_delta", '{"delta":{"type":"input_json_delta","partial_json":"{\\"x"}}'),
    ("content_block_start", '{"content_block":{"type":"text","text":""}}'),
    ("message_delta", '{"delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}'),
    ("message_stop", '{"type":"message_stop"}'),
    ("error", '{"type":"error"}'),
    ("", '{"type":"content_block_delta","delta":{"text":"b"}}'),
    ("pong", "{}"),
]
ANY_EVENT = st.sampled_from([DELTA] * 8 + QUIET * 3 + ODD)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ANY_EVENT, max_size=30),
    st.lists(st.integers(0, 30), max_size=8),
    st.lists(st.integers(0, 2000), max_size=4),
)
def test_runs_of_events_read_as_one_event_at_a_time(
    events: list[tuple[str, str]], between: list[int], cuts: list[int]
) -> None:
    """vLLM's layout cut between events (whole runs of them in one chunk, read at once) and
    anywhere gives the same tokens, text, stop reason and end as its events read one at a
    time in another layout."""
    expected = Exchange("e", stream=True)
    one_by_one = AnthropicAnswer(expected)
    for name, data in events:
        one_by_one.feed(f"event:{name}\r\ndata:{data}\r\n\r\n".encode())
    pieces = [f"event: {name}\ndata: {data}\n\n".encode() for name, data in events]
    body = b"".join(pieces)
    ends = list(itertools.accumulate(len(piece) for piece in pieces))
    at = [ends[i] for i in between if i < len(ends) - 1] + [c for c in cuts if c < len(body)]
    exchange, answer, _ = read(body, at)
    assert (exchange.output_tokens, exchange.has_text, exchange.finish_reason) == (
        expected.output_tokens,
        expected.has_text,
        expected.finish_reason,
    )
    assert answer.done == one_by_one.done and answer.between_events


def test_a_run_of_text_deltas_counts_each_at_once() -> None:
    """After the first text, a chunk of deltas, pings and block stops counts one token per
    delta; one with a stop reason or message_stop is read event by event."""
    exchange = Exchange("r", stream=True)
    answer = AnthropicAnswer(exchange)
    delta = b'event: content_block_delta\ndata: {"delta":{"type":"text_delta","text":"a"}}\n\n'
    answer.feed(delta)
    answer.feed(delta * 3 + b"event: ping\ndata: {}\n\n" + delta)
    assert exchange.output_tokens == 5 and exchange.has_text
    answer.feed(
        b"event: content_block_stop\ndata: {}\n\n" + delta + b"event: message_stop\ndata: {}\n\n"
    )
    assert exchange.output_tokens == 6 and answer.done
