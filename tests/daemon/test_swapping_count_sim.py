"""llmd on the simulator with on-demand engines stopped while asleep: a request whose prompt
only the engine can count (a chat with tools, a conversation with thinking blocks, a count
route) for an asleep model waits in the queue for its wake, is counted then and served, as any
request for an asleep model; never a 503 while nothing wakes the engine."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.daemon.test_swapping_sim import MODELS, engine_state, swap_config
from tests.support.llmd_process import LlmdProcess

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
THINKING = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "hello"},
        ],
    },
    {"role": "user", "content": "again"},
]
# Each: a path, and a body for `model` whose prompt llmd counts through the engine.
ENGINE_COUNTED: dict[str, tuple[str, dict[str, Any]]] = {
    "chat_tools": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], "max_tokens": 2},
    ),
    "messages_thinking": ("/v1/messages", {"messages": THINKING, "max_tokens": 2}),
    "count_tokens_thinking": ("/v1/messages/count_tokens", {"messages": THINKING}),
    "input_tokens_tools": (
        "/v1/responses/input_tokens",
        {"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]},
    ),
}


@pytest.fixture(scope="module")
def llmd() -> Any:
    with LlmdProcess.running(swap_config("stop"), "llmd-swapc-") as llmd:
        yield llmd


@pytest.mark.parametrize("case", list(ENGINE_COUNTED))
def test_a_prompt_the_engine_counts_waits_for_its_asleep_model(
    llmd: LlmdProcess, case: str
) -> None:
    """The request for an asleep (stopped) model is answered 200 once its engine woke."""
    awake = next(e["name"] for e in llmd.admin_status()["engines"] if e["state"] == "serving")
    model = next(m for m in MODELS if m != awake and engine_state(llmd, m) == "asleep")
    path, body = ENGINE_COUNTED[case]
    answer = httpx.post(llmd.base_url + path, json={"model": model, **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert engine_state(llmd, model) == "serving"
