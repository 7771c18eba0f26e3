"""A protocol as llmd speaks it: what its answers tell llmd as they pass (the first byte,
output tokens, whether there was text, and the finish reason, read from the bytes without
decoding each event), the shape of every error llmd answers on its paths, and the client
headers passed on to the engine.

    OPENAI     chat, completions and audio (streamed: server-sent events in any layout the
               WHATWG grammar allows, llmd/endpoints/events.py; or whole), and the JSON answers
               of vLLM's pooling, scoring and tokenizer routes (their usage counts no output);
               errors `{"error": {...}}`, in a stream an error event then `[DONE]`
    ANTHROPIC  Messages (llmd/endpoints/anthropic_stream.py): typed events ending at
               `message_stop`; errors `{"type": "error", "error": {...}}`, in a stream an
               `event: error`; `anthropic-version` and `anthropic-beta` go to the engine
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Protocol

from llmd.endpoints import anthropic_stream
from llmd.endpoints.events import EventStream
from llmd.endpoints.shapes import TokenShape
from llmd.errors import ApiError
from llmd.inflight import Exchange

# In an OpenAI answer's JSON (vLLM writes it compact; any JSON whitespace is allowed, and an
# event's data split over several `data:` lines is joined by LF, which JSON reads as space): a
# choice's finish reason, output text that is not empty (chat content or reasoning, a
# completion's text, a tool call), the usage's output count, and a chat stream's role delta.
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')
_SOME_TEXT = re.compile(
    rb'"(?:content|text|reasoning_content)"\s*:\s*"[^"]|"tool_calls"\s*:\s*\[\s*\{'
)
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_ROLE = re.compile(rb'"role"\s*:\s*"assistant"')
# What only `OpenAIAnswer.event` reads exactly (a role delta, a usage, an error, a finish reason
# that is not vLLM's compact `null`): an event without any of them is one plain token.
_NOT_PLAIN = re.compile(rb'"(?:role"|completion_tokens"|error"|finish_reason"(?!:null))')
# A whole count only (a digit-free byte after it): the next chunk may carry its last digits.
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)(?=\D)')
# Bytes of a whole answer kept from one chunk to the next, so that a usage figure split
# between two chunks is read whole: longer than `"prompt_tokens" : ` and a count.
_SEAM = 64
# How many times one stream tries to learn the shape of its token events (`TokenShape`), and
# how many chunks in a row may miss it before it is dropped (an `n` > 1 stream's choices take
# turns; a text with a line break, a finish or a usage misses it once): past both, every chunk
# is read by scanning it.
_SHAPES = 3
_MISSES = 4


def read_openai_chunk(exchange: Exchange, chunk: bytes) -> bool:
    """Account JSON text of an OpenAI answer (a whole non-streamed body, or one streamed
    event's data) into `exchange`: whether it carried text, the finish reason (`length` wins
    over any other: a choice was cut short) and the usage's `completion_tokens` (the engine's
    own count, which replaces llmd's estimate). True when it carried a usage figure."""
    _read_text_and_finish(exchange, chunk, _names_finish(exchange, chunk))
    if b'"completion_tokens"' in chunk:
        counts = _COMPLETION_TOKENS.findall(chunk)
        if counts:
            exchange.output_tokens = int(counts[-1])
            return True
    return False


def read_input_usage(exchange: Exchange, text: bytes) -> None:
    """The engine's count of the inputs from a whole answer's `usage.prompt_tokens` in
    `text` (the latest figure wins), for an exchange whose validation only bounded them
    (`Exchange.input_from_answer`): `input_tokens` becomes it, and `prompt_tokens` (the
    longest input's) at most it (exact for one input, still a bound for several)."""
    if b'"prompt_tokens"' not in text:
        return
    counts = _PROMPT_TOKENS.findall(text)
    if counts:
        exchange.input_tokens = total = int(counts[-1])
        longest = exchange.prompt_tokens
        exchange.prompt_tokens = total if longest is None else min(longest, total)


def _names_finish(exchange: Exchange, chunk: bytes) -> bool:
    """Whether `chunk` may name a finish reason `exchange` must read: every event of a stream
    but the last names it `null` (compact, as vLLM writes it), and `length` stays."""
    reasons = chunk.count(b'"finish_reason"')
    return (
        reasons > 0
        and reasons != chunk.count(b'"finish_reason":null')
        and exchange.finish_reason != "length"
    )


def _read_text_and_finish(exchange: Exchange, chunk: bytes, finish: bool) -> None:
    """Whether `chunk` carried text, and (when `finish`: `_names_finish`) its finish reason."""
    if not exchange.has_text and _SOME_TEXT.search(chunk):
        exchange.has_text = True
    if finish:
        for match in _FINISH_REASON.finditer(chunk):
            exchange.finish_reason = match.group(1).decode()
            if exchange.finish_reason == "length":
                break


class AnswerReader(Protocol):
    """Reads one exchange's answer as its chunks go to the client."""

    def feed(self, chunk: bytes) -> None:
        """Account `chunk`, the next bytes sent to the client."""

    @property
    def between_events(self) -> bool:
        """A stream's bytes so far end between two events (anything for a whole answer)."""

    @property
    def done(self) -> bool:
        """The stream's end-of-stream event has gone out (a whole answer: never)."""


class OpenAIAnswer:
    """An OpenAI answer as it passes: a stream's events (one output token per event whose
    data is a JSON object, less a chat stream's role delta and error events: vLLM sends about
    one token per event; a usage figure replaces the estimate), or a whole JSON body."""

    __slots__ = (
        "_misses", "_seam", "_shape", "_shapes_left", "_usage_seen", "events", "exchange",
    )  # fmt: skip

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.events = EventStream() if exchange.stream else None
        self._usage_seen = False
        self._seam = b""  # a whole answer's last bytes, while its inputs' count is wanted
        # The stream's token events by their shape, once a plain one was read (`_learn`).
        self._shape: TokenShape | None = None
        self._shapes_left = _SHAPES
        self._misses = 0  # chunks in a row that were not of the shape

    @property
    def between_events(self) -> bool:
        return self.events is None or self.events.between_events

    @property
    def done(self) -> bool:
        return self.events is not None and self.events.done

    def feed(self, chunk: bytes) -> None:
        exchange = self.exchange
        if exchange.first_byte_at is None:
            exchange.first_byte_at = time.monotonic()
        events = self.events
        if events is None:
            read_openai_chunk(exchange, chunk)
            if exchange.input_from_answer:
                joined = self._seam + chunk
                read_input_usage(exchange, joined)
                self._seam = joined[-_SEAM:]
            return
        if self._shape is None and self._shapes_left and events.between_events:
            self._learn(chunk)
        shape = self._shape
        if shape is not None:  # the most common: token events of the stream's shape
            read = events.feed_shaped(chunk, shape)
            if read is None:
                self._misses += 1
                if self._misses >= _MISSES:  # not this stream's shape now: learn it again
                    self._shape = None
                    self._misses = 0
            else:
                self._misses = 0
                tokens, text, at = read
                if text:
                    exchange.has_text = True
                if not self._usage_seen:
                    exchange.output_tokens += tokens
                if at == len(chunk):
                    return
                chunk = chunk[at:]  # what follows them, read as before
        if events.feed_object(chunk):  # one event, a JSON object
            if _NOT_PLAIN.search(chunk) is not None:
                self.event(chunk[6:-2])
                return
            if not exchange.has_text and _SOME_TEXT.search(chunk):
                exchange.has_text = True
            if not self._usage_seen:
                exchange.output_tokens += 1
            return
        run = events.feed_run(chunk)
        if not run:
            for _, data in events.feed(chunk):
                self.event(data)
        elif not self._run_read(chunk, run):
            for event in chunk[:-2].split(b"\n\n"):
                self.event(event[6:])

    def feed_tokens(self, chunk: bytes) -> int:
        """Account the whole token events of the stream's shape (once learned: `_learn`) that
        `chunk` starts with, as `feed` would: the bytes they take (all of `chunk`: nothing else
        in it; 0: none, nothing read). The rest (a finish, a usage, a partial event) is for
        `feed`. A few compares and finds an event (`TokenShape.read`)."""
        shape, events = self._shape, self.events
        if shape is None or events is None:
            return 0
        read = events.feed_shaped(chunk, shape)
        if read is None:
            return 0
        tokens, text, at = read
        exchange = self.exchange
        if text:
            exchange.has_text = True
        if not self._usage_seen:
            exchange.output_tokens += tokens
        return at

    def _learn(self, chunk: bytes) -> None:
        """Take the stream's shape (`TokenShape`) from the first plain token event among the
        first two whole events of `chunk` (a chat stream's first is its role delta), where
        `chunk` starts between events; one of the stream's `_SHAPES` tries."""
        self._shapes_left -= 1
        at = 0
        for _ in range(2):
            end = chunk.find(b"\n", at)  # a whole event is one line and a blank one
            if end < 0 or chunk[end + 1 : end + 2] != b"\n" or not chunk.startswith(b"data: {", at):
                return
            event = chunk[at : end + 2]
            if b"\r" not in event and _NOT_PLAIN.search(event) is None:
                self._shape = TokenShape.of(event)
                return
            at = end + 2

    def _run_read(self, chunk: bytes, events: int) -> bool:
        """Account a run of `events` whole events in vLLM's layout (`EventStream.feed_run`)
        at once, as `event` would one by one: when each is a JSON object (or the last is
        `[DONE]`), none the role delta, an error or a usage, and each ends with `}` where a
        pattern will run (so that no match spans two events). Whether it did. A few scans
        in C per chunk, however many events it holds."""
        if events == 1:  # the most common: one event, an object or [DONE]
            if not (chunk.startswith(b"data: {") and chunk.endswith(b"}\n\n")):
                return chunk == b"data: [DONE]\n\n"
            objects = 1
        else:
            done = 1 if chunk.endswith(b"data: [DONE]\n\n") else 0
            objects = chunk.count(b"\n\ndata: {") + (1 if chunk.startswith(b"data: {") else 0)
            if objects + done != events:
                return False
        exchange = self.exchange
        if _NOT_PLAIN.search(chunk) is None:  # plain tokens only: the checks below all pass
            finish = False
        else:
            error = chunk.startswith(b'data: {"error"') or (
                events > 1 and b'data: {"error"' in chunk
            )
            if error or b'"role"' in chunk or b'"completion_tokens"' in chunk:
                return False
            finish = _names_finish(exchange, chunk)
        if events > 1 and (finish or not exchange.has_text) and chunk.count(b"}\n\n") != objects:
            return False  # an event not ending with `}`: a pattern could span two
        _read_text_and_finish(exchange, chunk, finish)
        if not self._usage_seen:
            exchange.output_tokens += objects
        return True

    def event(self, data: bytes) -> None:
        """Account one event's `data`: a JSON object is a token (less a chat stream's role
        delta and an error) until a usage figure, which replaces the count."""
        if data[:1] != b"{":
            data = data.lstrip()
            if data[:1] != b"{":
                return  # [DONE], or not an object
        exchange = self.exchange
        if read_openai_chunk(exchange, data):
            self._usage_seen = True
        elif not self._usage_seen and not (
            data.startswith(b'{"error"') or (b'"role"' in data and _ROLE.search(data))
        ):
            exchange.output_tokens += 1


@dataclasses.dataclass(frozen=True)
class Dialect:
    """A protocol as the relay speaks it: `name`; `reader(exchange)`: what reads each of its
    answers as the chunks go to the client; `error_body(error)`: a whole error answer's body;
    `stream_error(error)`: the bytes that end a started stream with `error`;
    `forward_headers`: the client's request headers (ASGI names, lower case) sent on to the
    engine with the body."""

    name: str
    reader: Callable[[Exchange], AnswerReader]
    error_body: Callable[[ApiError], bytes] = ApiError.body
    stream_error: Callable[[ApiError], bytes] = ApiError.sse_event
    forward_headers: tuple[bytes, ...] = ()


OPENAI = Dialect("openai", OpenAIAnswer)
# Anthropic's API versions its answers by `anthropic-version` and turns on features by
# `anthropic-beta`; vLLM 0.32 reads neither, a newer one or an upstream may.
ANTHROPIC = Dialect(
    "anthropic",
    anthropic_stream.AnthropicAnswer,
    anthropic_stream.error_body,
    anthropic_stream.stream_error,
    (b"anthropic-version", b"anthropic-beta"),
)
