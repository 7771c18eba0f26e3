"""`--vllm-version`: the simulator answers as vLLM 0.32 (default) or 0.31 where they differ (the
context check), and the same everywhere else."""

from __future__ import annotations

import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory

LONG = " a" * 1000  # 1,001 tokens with the BOS


async def test_version_and_wording_are_the_ones_mimicked(make_sim: SimFactory) -> None:
    """GET /version answers the mimicked release (0.32.0 by default); an unknown model's 404
    names the served model in 0.32 only."""
    default, old = await make_sim(), await make_sim("--vllm-version", "0.31.0")
    assert (await default.client.get("/version")).json() == {"version": "0.32.0"}
    assert (await old.client.get("/version")).json() == {"version": "0.31.0"}
    body = {"model": "nope", "prompt": "x"}
    new_404 = (await default.client.post("/v1/completions", json=body)).json()["error"]
    old_404 = (await old.client.post("/v1/completions", json=body)).json()["error"]
    assert new_404["message"] == "The model `nope` does not exist. Valid aliases: tiny."
    assert old_404["message"] == "The model `nope` does not exist."


def test_an_unknown_version_is_a_usage_error() -> None:
    """Only the releases in llmd/engine/sim/surface.py can be mimicked (argparse exit 2)."""
    from llmd.engine.sim.options import parse_options

    with pytest.raises(SystemExit) as exited:
        parse_options(["--model", "m", "--uds", "s", "--vllm-version", "0.30.0"])
    assert exited.value.code == 2


async def test_0_31_refuses_prompt_plus_max_tokens_over_the_context(make_sim: SimFactory) -> None:
    """0.31: the prompt fits but not with max_tokens: 400 naming the output tokens and the
    prompt tokens read up to the input budget + 1 (vLLM 0.31 `_token_len_check`)."""
    sim: RunningSim = await make_sim("--vllm-version", "0.31.0")
    answer = await sim.client.post("/v1/completions", json={"prompt": LONG, "max_tokens": 500})
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == "input_tokens"
    assert error["message"] == (
        "This model's maximum context length is 1024 tokens. However, you requested 500 output "
        "tokens and your prompt contains at least 525 input tokens, for a total of at least 1025 "
        "tokens. Please reduce the length of the input prompt or the number of requested output "
        "tokens. (parameter=input_tokens, value=525)"
    )
    ids = list(range(4, 604))  # token ids are not cut short: their exact count is said
    answer = await sim.client.post("/v1/completions", json={"prompt": ids, "max_tokens": 500})
    assert "your prompt contains 600 input tokens, for a total of 1100" in answer.text


@pytest.mark.parametrize(("version", "served"), [("0.32.0", True), ("0.31.0", False)])
async def test_the_completions_default_counts_against_the_context(
    make_sim: SimFactory, version: str, served: bool
) -> None:
    """A completion without max_tokens asks for 16: with 10 tokens of room 0.32 serves 10,
    0.31 refuses it; an explicit null asks for the room left in both."""
    sim: RunningSim = await make_sim("--vllm-version", version)
    ids = list(range(4, 1018))  # 1,014 tokens: room for 10
    omitted = await sim.client.post("/v1/completions", json={"prompt": ids})
    assert (omitted.status_code == 200) is served
    if served:
        assert omitted.json()["usage"]["completion_tokens"] == 10
    else:
        assert "you requested 16 output tokens" in omitted.json()["error"]["message"]
    null = await sim.client.post("/v1/completions", json={"prompt": ids, "max_tokens": None})
    assert null.status_code == 200 and null.json()["usage"]["completion_tokens"] == 10


@pytest.mark.parametrize("version", ["0.32.0", "0.31.0"])
async def test_what_both_refuse_alike(make_sim: SimFactory, version: str) -> None:
    """In both: max_completion_tokens over max_model_len is a 400 naming that field; a chat
    prompt that fills the context with max_tokens omitted leaves 0 tokens: 400."""
    sim: RunningSim = await make_sim("--vllm-version", version)
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1025}
    over = (await sim.client.post("/v1/chat/completions", json=chat)).json()["error"]
    assert over["param"] == "max_completion_tokens"
    assert over["message"].startswith("max_completion_tokens=1025 cannot be greater than")
    full = await sim.client.post("/v1/completions", json={"prompt": list(range(4, 1028)),
                                                           "max_tokens": None})  # fmt: skip
    assert full.status_code == 400 and "max_tokens must be at least 1" in full.text
