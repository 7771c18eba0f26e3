"""/tokenize and /detokenize on the simulator, for both kinds of model."""

from __future__ import annotations

import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory


@pytest.mark.parametrize("args", [(), ("--runner", "pooling")])
async def test_round_trip(make_sim: SimFactory, args: tuple[str, ...]) -> None:
    """Every model tokenizes; /detokenize gives back the text with the special tokens kept."""
    sim = await make_sim(*args)
    tokens = (await sim.client.post("/tokenize", json={"prompt": "hello world"})).json()
    text = (await sim.client.post("/detokenize", json={"tokens": tokens["tokens"]})).json()
    assert text == {"prompt": "<s>hello world"}


async def test_token_strs(sim: RunningSim) -> None:
    """`return_token_strs` adds the vocabulary strings; without it they are null."""
    plain = (await sim.client.post("/tokenize", json={"prompt": "hi"})).json()
    strs = (
        await sim.client.post("/tokenize", json={"prompt": "hi", "return_token_strs": True})
    ).json()
    assert plain["token_strs"] is None and strs["token_strs"][0] == "<s>"
    assert list(plain) == ["count", "max_model_len", "tokens", "token_strs"]


async def test_detokenize_refusals(sim: RunningSim) -> None:
    """A negative id is pydantic's 400; an id past the vocabulary decodes to nothing; an
    unknown model is vLLM's 404."""
    negative = await sim.client.post("/detokenize", json={"tokens": [-1]})
    past = await sim.client.post("/detokenize", json={"tokens": [1, 5000]})
    model = await sim.client.post("/detokenize", json={"model": "nope", "tokens": [1]})
    assert negative.status_code == 400
    assert negative.json()["error"]["param"] == "body.tokens.0"
    assert "'ctx': {'ge': 0}" in negative.json()["error"]["message"]
    assert past.json() == {"prompt": "<s>"}
    assert model.status_code == 404 and model.json()["error"]["type"] == "NotFoundError"
