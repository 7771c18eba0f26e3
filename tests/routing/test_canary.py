"""Sticky canary assignment: per tenant and conversation, monotone in the share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmd.endpoints.openai import read_chat, read_completions
from llmd.routing.canary import canary_point, conversation_key, goes_to_canary
from llmd.routing.prefix import PREFIX_CHARS


@given(st.text(), st.text(), st.floats(0, 100), st.floats(0, 100))
def test_raising_the_share_only_moves_users_to_the_new_release(
    tenant: str, key: str, low: float, high: float
) -> None:
    """Property: on the new release at a share, still on it at any higher share."""
    low, high = min(low, high), max(low, high)
    if goes_to_canary(tenant, key, low):
        assert goes_to_canary(tenant, key, high)
    assert not goes_to_canary(tenant, key, 0) and goes_to_canary(tenant, key, 100)


def test_points_spread_evenly_so_the_share_is_the_traffic_share() -> None:
    """10,000 conversations at 25%: between 23.5% and 26.5% go to the new release."""
    hits = sum(goes_to_canary("tenant", f"conversation {i}", 25) for i in range(10_000))
    assert 2350 <= hits <= 2650


def test_the_tenant_is_part_of_the_point() -> None:
    """The same opening from another tenant lands elsewhere (one user's luck is not all's)."""
    points = {canary_point(f"tenant-{i}", "Hello") for i in range(50)}
    assert len(points) == 50 and all(0 <= p < 100 for p in points)


def chat(*messages: tuple[str, str]) -> str:
    body = {"messages": [{"role": r, "content": c} for r, c in messages]}
    return conversation_key(read_chat(body).prompt)


def test_later_turns_of_a_conversation_keep_its_key() -> None:
    """Turns appended after the first user message do not move the conversation."""
    first = chat(("system", "Be brief."), ("user", "Plan my trip"))
    later = chat(
        ("system", "Be brief."),
        ("user", "Plan my trip"),
        ("assistant", "Where to?"),
        ("user", "Lisbon"),
    )
    assert first == later
    assert chat(("user", "Another question")) != first


def test_a_completion_is_keyed_by_the_start_of_its_prompt() -> None:
    """Completions: the first prompt's first characters; token-id prompts too."""
    text = read_completions({"prompt": "x" * 5000}).prompt
    assert conversation_key(text) == "x" * PREFIX_CHARS  # the prefix key's length, one fact
    ids = read_completions({"prompt": [1, 2, 3]}).prompt
    assert conversation_key(ids) == "[1, 2, 3]"
