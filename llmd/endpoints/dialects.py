"""What a protocol's answers tell llmd as they pass: the first byte, output tokens, whether
there was text, and the finish reason, read from the bytes without decoding each event.

    OPENAI  chat, completions and audio (streamed: server-sent events in any layout the
            WHATWG grammar allows, llmd/endpoints/events.py; or whole), and the JSON answers
            of vLLM's pooling, scoring and tokenizer routes (their usage counts no output)
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Protocol

from llmd.endpoints.events import EventStream
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


def read_openai_chunk(exchange: Exchange, chunk: bytes) -> bool:
    """Account JSON text of an OpenAI answer (a whole non-streamed body, or one streamed
    event's data) into `exchange`: whether it carried text, the finish reason (`length` wins
    over any other: a choice was cut short) and the usage's `completion_tokens` (the engine's
    own count, which replaces llmd's estimate). True when it carried a usage figure."""
    if not exchange.has_text and _SOME_TEXT.search(chunk):
        exchange.has_text = True
    # Every event of a stream but the last names its finish reason `null` (compact, as vLLM
    # writes it): the pattern runs only where some finish reason may not be.
    reasons = chunk.count(b'"finish_reason"')
    if (
        reasons
        and reasons != chunk.count(b'"finish_reason":null')
        and exchange.finish_reason != "length"
    ):
        for match in _FINISH_REASON.finditer(chunk):
            exchange.finish_reason = match.group(1).decode()
            if exchange.finish_reason == "length":
                break
    if b'"completion_tokens"' in chunk:
        counts = _COMPLETION_TOKENS.findall(chunk)
        if counts:
            exchange.output_tokens = int(counts[-1])
            return True
    return False


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

    __slots__ = ("_usage_seen", "events", "exchange")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.events = EventStream() if exchange.stream else None
        self._usage_seen = False

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
        if self.events is None:
            read_openai_chunk(exchange, chunk)
            return
        for _, data in self.events.feed(chunk):
            if data[:1] != b"{":
                data = data.lstrip()
                if data[:1] != b"{":
                    continue  # [DONE], or not an object
            if read_openai_chunk(exchange, data):
                self._usage_seen = True
            elif not self._usage_seen and not (
                data.startswith(b'{"error"') or (b'"role"' in data and _ROLE.search(data))
            ):
                exchange.output_tokens += 1


@dataclasses.dataclass(frozen=True)
class Dialect:
    """A protocol as the relay reads it: `name`, and `reader(exchange)`: what reads each of
    its answers as the chunks go to the client."""

    name: str
    reader: Callable[[Exchange], AnswerReader]


OPENAI = Dialect("openai", OpenAIAnswer)
