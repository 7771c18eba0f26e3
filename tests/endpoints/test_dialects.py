"""Reading an OpenAI answer as it passes: first byte, output tokens, usage, text and the
finish reason, from the bytes."""

from __future__ import annotations

from llmd.endpoints.dialects import OpenAIAnswer
from llmd.inflight import Exchange


def feed(exchange: Exchange, chunk: bytes) -> None:
    """`chunk` through the exchange's one reader (made on its first chunk)."""
    if exchange not in READERS:
        READERS[exchange] = OpenAIAnswer(exchange)
    READERS[exchange].feed(chunk)


READERS: dict[Exchange, OpenAIAnswer] = {}


def test_streamed_chunks_count_tokens_and_usage_replaces_the_estimate() -> None:
    """One token per SSE event (less the role event); the usage figure, when sent, wins."""
    exchange = Exchange("r", stream=True)
    feed(exchange, b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    feed(exchange, b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' * 3)
    assert exchange.output_tokens == 3 and exchange.first_byte_at is not None
    feed(exchange, b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}\n\n')
    assert exchange.output_tokens == 4
    whole = Exchange("s", stream=False)
    feed(whole, b'{"choices":[],"usage":{"completion_tokens": 17,"total_tokens":20}}')
    assert whole.output_tokens == 17


def test_the_answer_s_text_and_finish_reason_are_read_from_its_chunks() -> None:
    """A stream whose role event has empty content has no text until a delta carries some;
    its finish reason is the last chunk's, `length` wins over another choice's `stop`; a
    non-streamed empty answer has no text."""
    stream = Exchange("r", stream=True)
    feed(stream, b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    assert not stream.has_text and stream.finish_reason is None
    feed(stream, b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
    assert stream.has_text
    feed(stream, b'data: {"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}\n\n')
    assert stream.finish_reason == "stop"
    both = Exchange("n2", stream=False)
    feed(
        both,
        b'{"choices":[{"text":"","finish_reason":"length","prompt_text":"x"},'
        b'{"text":"","finish_reason":"stop"}]}',
    )
    assert both.finish_reason == "length" and not both.has_text
    tools = Exchange("t", stream=False)
    feed(tools, b'{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c"}]}}]}')
    assert tools.has_text


def test_a_finish_reason_is_found_among_null_ones_in_one_chunk() -> None:
    """A chunk of several events, some with `"finish_reason":null`, gives the one that is
    not; a chunk of null ones alone (compact or spaced) gives none."""
    stream = Exchange("r", stream=True)
    feed(stream, b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":null}]}\n\n' * 2)
    feed(stream, b'data: {"choices":[{"delta":{"content":"b"},"finish_reason": null}]}\n\n')
    assert stream.finish_reason is None
    feed(
        stream,
        b'data: {"choices":[{"delta":{"content":"c"},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n',
    )
    assert stream.finish_reason == "length"


def test_a_bounded_exchange_takes_the_engine_s_input_count_from_the_whole_answer() -> None:
    """An exchange whose inputs validation only bounded takes `usage.prompt_tokens` as its
    input tokens, and its longest input's at most that, even split across two chunks; an
    exchange counted exactly keeps llmd's count."""
    answer = b'{"data":[{"embedding":[0.5]}],"usage":{"prompt_tokens":15,"total_tokens":15}}'
    for cut in range(1, len(answer)):
        bounded = Exchange(f"b{cut}", stream=False, input_from_answer=True)
        bounded.prompt_tokens, bounded.input_tokens = 40, 90
        feed(bounded, answer[:cut])
        feed(bounded, answer[cut:])
        assert (bounded.input_tokens, bounded.prompt_tokens) == (15, 15), cut
    one = Exchange("one", stream=False, input_from_answer=True)
    one.prompt_tokens, one.input_tokens = 9, 9
    feed(one, answer)
    assert (one.input_tokens, one.prompt_tokens) == (15, 9)
    counted = Exchange("c", stream=False)
    counted.prompt_tokens, counted.input_tokens = 7, 12
    feed(counted, answer)
    assert (counted.input_tokens, counted.prompt_tokens) == (12, 7)
