"""The prefix key: stable over a conversation's turns, shared by a shared long prefix, absent
for short prompts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.endpoints.openai import read_chat, read_completions, read_embeddings, read_rerank
from llmd.routing.prefix import PREFIX_CHARS, prefix_key

SYSTEM = "You are a careful assistant for the accounting team. " * 30  # > PREFIX_CHARS


def chat(*turns: str, system: str = SYSTEM) -> dict[str, Any]:
    roles = ["user", "assistant"]
    messages = [{"role": "system", "content": system}]
    messages += [{"role": roles[i % 2], "content": text} for i, text in enumerate(turns)]
    return {"model": "m", "messages": messages}


def key(payload: dict[str, Any]) -> str | None:
    """The prefix key of a chat or completions body, read as the relay reads it."""
    fields = read_chat(payload) if "messages" in payload else read_completions(payload)
    return prefix_key(fields.prompt)


def test_shared_system_prompt_shares_the_key() -> None:
    """Requests that differ only after the first PREFIX_CHARS characters get one key."""
    assert len(SYSTEM) > PREFIX_CHARS
    first = key(chat("What is a ledger?"))
    assert first is not None and len(first) == 16
    assert key(chat("Close the books for May.")) == first
    assert key(chat("Hi", system="Another team's prompt. " * 60)) != first


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=100, max_size=400), min_size=1, max_size=8))
def test_a_conversation_keeps_its_key_once_long_enough(turns: list[str]) -> None:
    """Each turn appends to the messages, so once a key exists every later turn has it."""
    keys = [key(chat(*turns[: i + 1], system="short")) for i in range(len(turns))]
    first = next((i for i, key in enumerate(keys) if key is not None), None)
    if first is not None:
        assert set(keys[first:]) == {keys[first]}


def test_short_prompts_have_no_key() -> None:
    """Fewer than PREFIX_CHARS characters: too little to cache, no affinity."""
    assert key({"prompt": "x" * (PREFIX_CHARS - 1)}) is None
    assert key(chat("hi", system="short")) is None
    assert key({"prompt": "x" * PREFIX_CHARS}) is not None


def test_completion_prompt_forms() -> None:
    """A string, a batch (keyed by its first prompt) and token ids all give keys."""
    text = "y" * PREFIX_CHARS
    assert key({"prompt": [text, "other"]}) == key({"prompt": text})
    tokens = list(range(1000))
    assert key({"prompt": tokens}) == key({"prompt": [tokens, [1, 2]]})
    assert key({"prompt": tokens}) is not None


def test_roles_and_images_are_part_of_the_key() -> None:
    """The same text as a different role, or beside a different image, is another prefix."""
    as_user = {"messages": [{"role": "user", "content": SYSTEM}]}
    assert key(as_user) != key({"messages": [{"role": "system", "content": SYSTEM}]})

    def with_image(url: str) -> dict[str, Any]:
        parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": SYSTEM}]
        return {"messages": [{"role": "user", "content": parts}]}

    assert key(with_image("data:a")) != key(with_image("data:b"))
    assert key(with_image("data:a")) == key(with_image("data:a"))


def test_pooling_inputs_and_scored_pairs_have_keys() -> None:
    """An embeddings input is keyed like a completion prompt (its first input); a rerank by
    its query, the text every pair shares."""
    text = "z" * PREFIX_CHARS
    assert prefix_key(read_embeddings({"input": [text, "b"]}).prompt) == key({"prompt": text})
    rerank = read_rerank({"query": text, "documents": ["a", "b"]}).prompt
    assert prefix_key(rerank) == key({"prompt": text})
