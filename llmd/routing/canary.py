"""Sticky canary assignment (pure): which release a request goes to while the new one takes
`share` percent of an engine's traffic.

A request's point is a hash of its tenant and its conversation's prefix mapped into [0, 100);
it goes to the new release when the point is below the share. The same user in the same
conversation always lands on the same point, so it never flips between releases within a step,
and raising the share only moves points from the old release to the new one, never back.
SHA-256 rather than Python's `hash`, which is salted per process.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llmd.routing.prefix import PREFIX_CHARS
from llmd.validation.fields import ChatPrompt, EnginePrompt, Prompt, first_text, messages_of


def canary_point(tenant: str, prefix_key: str) -> float:
    """The point of (tenant, conversation prefix) in [0, 100)."""
    digest = hashlib.sha256(f"{tenant}\x00{prefix_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100


def goes_to_canary(tenant: str, prefix_key: str, share: float) -> bool:
    """Whether this request goes to the new release at `share` percent (0..100)."""
    return canary_point(tenant, prefix_key) < share


def conversation_key(prompt: Prompt) -> str:
    """What names a conversation across its turns: the messages up to and including the first
    user message (later turns only append), or a completion's (or pooling request's) first
    prompt; at most PREFIX_CHARS characters (the prefix key's: enough to tell conversations
    apart, bounded so that hashing costs the same for a long prompt)."""
    messages = messages_of(prompt)
    if messages is not None:
        opening: list[Any] = []
        for message in messages:
            if not isinstance(message, dict):
                break
            opening.append([message.get("role"), message.get("content")])
            if message.get("role") == "user":
                break
        text = json.dumps(opening, ensure_ascii=False, sort_keys=True)
    else:
        assert not isinstance(prompt, ChatPrompt | EnginePrompt)
        first = first_text(prompt)
        text = first if isinstance(first, str) else json.dumps(first[: PREFIX_CHARS // 4])
    return text[:PREFIX_CHARS]
