"""The simulator's `n` > 1 (vLLM 0.32's parallel sampling): one event a choice a step, the
usage over every choice, the fingerprint where vLLM puts it."""

from __future__ import annotations

import json
from typing import Any

from llmd.engine.sim.responses import SYSTEM_FINGERPRINT
from tests.engine.sim.conftest import RunningSim, SimFactory
from tests.engine.sim.test_server import CHAT, events


def chunks(text: str) -> list[dict[str, Any]]:
    payloads = events(text)
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


async def test_a_chat_stream_of_three_choices(sim: RunningSim) -> None:
    """A role delta a choice, then each choice's tokens in events of their own, each choice's
    last with its finish reason and the fingerprint; no usage unless asked."""
    body = {**CHAT, "n": 3, "max_tokens": 5, "stream": True}
    sent = chunks((await sim.client.post("/v1/chat/completions", json=body)).text)
    assert [c["choices"][0]["index"] for c in sent[:3]] == [0, 1, 2]
    assert all(c["choices"][0]["delta"] == {"role": "assistant", "content": ""} for c in sent[:3])
    assert all(len(c["choices"]) == 1 for c in sent) and "usage" not in sent[-1]
    for index in range(3):
        own = [c for c in sent[3:] if c["choices"][0]["index"] == index]
        assert own[-1]["choices"][0]["finish_reason"] == "length"
        assert own[-1]["system_fingerprint"] == SYSTEM_FINGERPRINT
        assert all(c["choices"][0]["finish_reason"] is None for c in own[:-1])
        assert all("system_fingerprint" not in c for c in own[:-1])


async def test_the_usage_counts_the_prompt_once_and_every_choice(sim: RunningSim) -> None:
    """With include_usage: finish events without the fingerprint, the usage event after
    them with it; completions of n=2 carry 2 x 6 tokens; the whole answer has n choices."""
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    body = {"model": "tiny", "prompt": "Hello", "n": 2, "max_tokens": 6, **asked}
    sent = chunks((await sim.client.post("/v1/completions", json=body)).text)
    usage = sent[-1]
    assert usage["choices"] == [] and usage["system_fingerprint"] == SYSTEM_FINGERPRINT
    assert usage["usage"]["completion_tokens"] == 12
    assert all("system_fingerprint" not in c for c in sent[:-1])
    assert sorted(c["choices"][0]["index"] for c in sent[:-1]) == [0] * 6 + [1] * 6
    whole = (
        await sim.client.post(
            "/v1/completions", json={**body, "stream": False, "stream_options": None}
        )
    ).json()
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    assert whole["usage"]["completion_tokens"] == 12
    assert whole["usage"]["prompt_tokens"] == usage["usage"]["prompt_tokens"]


async def test_the_choices_are_sampled_apart(sim: RunningSim) -> None:
    """Each choice has its own text (a choice 0 as the n=1 request's)."""
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "seed": 3}
    one = (await sim.client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    two = (await sim.client.post("/v1/completions", json={**body, "n": 2})).json()["choices"]
    assert two[0]["text"] == one and two[1]["text"] != one


async def test_a_timed_stream_counts_every_choice(make_sim: SimFactory) -> None:
    """Timed steps faster than the server streams them (it may fold a choice's steps into one
    event, as vLLM's does; how often depends on the machine): the usage stays exact, no
    event holds more than one choice."""
    sim: RunningSim = await make_sim("--step-base-ms", "0.2", "--stream-token-us", "300")
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    body = {"model": "tiny", "prompt": "Hello", "n": 4, "max_tokens": 40, **asked}
    sent = chunks((await sim.client.post("/v1/completions", json=body)).text)
    assert sent[-1]["usage"]["completion_tokens"] == 160
    assert len(sent) - 1 <= 160 and all(len(c["choices"]) == 1 for c in sent[:-1])


async def test_greedy_sampling_takes_one_choice(sim: RunningSim) -> None:
    """n > 1 at temperature 0 is refused as vLLM 0.32 refuses it."""
    body = {**CHAT, "n": 2, "temperature": 0}
    answer = await sim.client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "n must be 1 when using greedy sampling, got 2."
