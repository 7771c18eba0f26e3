"""The prefix key of a request: requests with the same key share their first `PREFIX_CHARS`
characters of prompt, so sending them to one backend lets vLLM's prefix cache serve them.
`PREFIX_CHARS` is also how much of a conversation's start names it for a canary
(llmd/routing/canary.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from llmd.validation.fields import ChatPrompt, EnginePrompt, Prompt, first_text, messages_of

# About 256 tokens at about 4 characters per token (the guess of gateway-api-inference-extension's
# prefix scorer, pkg/epp/scheduling/framework/plugins/multi/prefix), i.e. 16 KV blocks at vLLM's
# GPU default of 16 tokens (2 at the CPU build's 128): long enough that a shared system prompt
# or conversation is worth keeping together, short enough that a conversation keeps one key
# from its second or third turn on.
PREFIX_CHARS = 1024
_ROLE_END = "\x1f"  # unit separator: between a message's role and its content
_MESSAGE_END = "\x1e"  # record separator: after each message
# A non-text part (an image) counts by its type and the start of its URL or data URL.
_SOURCE_CHARS = 256


def prefix_key(prompt: Prompt, chars: int = PREFIX_CHARS) -> str | None:
    """A 16-hex-digit key for the first `chars` characters of the request's prompt, or None
    when the prompt is shorter (too little to cache).

    The prompt is a completion's or a pooling request's first prompt (token ids as their
    decimal text; a batch goes to one backend, keyed by its first), a scored pair's first
    text, and for chat the messages in order, each as its role, a separator, its text parts
    (a non-text part as its type and the first 256 characters of its URL) and a separator.
    The key covers the start of the conversation, not "everything before the last user
    turn": a conversation's later turns only append, so all its turns past the first `chars`
    characters share its key and so its backend. Tools, images' content and sampling fields
    are not part of the key.
    """
    text = "".join(_take(_pieces(prompt), chars))
    if len(text) < chars:
        return None
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def _take(pieces: Iterator[str], chars: int) -> Iterator[str]:
    """The pieces up to `chars` characters in all (the last one cut), reading no further."""
    left = chars
    for piece in pieces:
        if left <= 0:
            return
        yield piece[:left]
        left -= len(piece)


def _pieces(prompt: Prompt) -> Iterator[str]:
    messages = messages_of(prompt)
    if messages is not None:
        for message in messages:
            if not isinstance(message, dict):
                return
            yield str(message.get("role", ""))
            yield _ROLE_END
            yield from _content(message.get("content"))
            yield _MESSAGE_END
        return
    assert not isinstance(prompt, ChatPrompt | EnginePrompt)
    first = first_text(prompt)
    yield first if isinstance(first, str) else ",".join(str(token) for token in first)


def _content(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = str(part.get("type", ""))
            if kind == "text":
                yield str(part.get("text", ""))
                continue
            inner = part.get(kind)  # e.g. {"type": "image_url", "image_url": {"url": ...}}
            source = inner.get("url") if isinstance(inner, dict) else inner
            yield f"<{kind}:{str(source)[:_SOURCE_CHARS]}>"
