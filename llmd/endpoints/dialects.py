"""What a protocol's answers tell llmd as they pass: the first byte, output tokens, whether
there was text, and the finish reason, read from the bytes without decoding each event.

    OPENAI  chat, completions (streamed: `data: {...}` events, or whole), and the JSON answers
            of vLLM's pooling, scoring and tokenizer routes (their usage counts no output)
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

from llmd.inflight import Exchange

# In an OpenAI answer's JSON (vLLM writes it compact): a choice's finish reason, and output
# text that is not empty (chat content or reasoning, a completion's text, a tool call).
_FINISH_REASON = re.compile(rb'"finish_reason":\s*"([a-z_]+)"')
_SOME_TEXT = re.compile(rb'"(?:content|text|reasoning_content)":\s*"[^"]|"tool_calls":\s*\[\s*\{')


def read_openai_chunk(exchange: Exchange, chunk: bytes) -> None:
    """Account a body chunk of an OpenAI answer sent to the client into `exchange`: first-byte
    time, output tokens, whether it carried text and the finish reason.

    Streams count one token per SSE `data: {` event (vLLM sends about one token per event),
    less the chat stream's first event, which carries only the role. A `completion_tokens`
    figure in the chunk (the usage of a non-streamed answer, or a stream's include_usage
    event) replaces the estimate with the engine's own count. Text and finish reason are
    read from the chunk's JSON as vLLM writes it (a field split across two chunks is not
    seen; vLLM writes each SSE event whole).
    """
    if exchange.first_byte_at is None:
        exchange.first_byte_at = time.monotonic()
    if not exchange.has_text and _SOME_TEXT.search(chunk):
        exchange.has_text = True
    # Every event of a stream but the last names its finish reason `null`: the pattern runs
    # only on a chunk where some finish reason is not (vLLM writes compact JSON).
    reasons = chunk.count(b'"finish_reason":')
    if (
        reasons
        and reasons != chunk.count(b'"finish_reason":null')
        and exchange.finish_reason != "length"
    ):
        for match in _FINISH_REASON.finditer(chunk):
            exchange.finish_reason = match.group(1).decode()
            if exchange.finish_reason == "length":
                break
    usage = chunk.rfind(b'"completion_tokens":')
    if usage >= 0:
        digits = chunk[usage + 20 : usage + 32].lstrip()
        end = 0
        while end < len(digits) and 48 <= digits[end] <= 57:
            end += 1
        if end:
            exchange.output_tokens = int(digits[:end])
            return
    if exchange.stream:
        exchange.output_tokens += chunk.count(b"data: {") - chunk.count(b'"role":"assistant"')


@dataclasses.dataclass(frozen=True)
class Dialect:
    """A protocol as the relay reads it: `name`, and `read_chunk(exchange, chunk)` for each
    body chunk sent to the client."""

    name: str
    read_chunk: Callable[[Exchange, bytes], None]


OPENAI = Dialect("openai", read_openai_chunk)
