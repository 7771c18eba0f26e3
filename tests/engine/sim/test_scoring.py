"""Score and rerank on the simulator: pairing rules, every request shape, usage, the
bi-encoder (embedding model) and the cross-encoder (one-label classifier)."""

from __future__ import annotations

import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory

DOCS = ["world", "foo bar", "a longer document here"]


@pytest.fixture
async def embed(make_sim: SimFactory) -> RunningSim:
    """A simulated embedding model: scores are cosines of embeddings."""
    running: RunningSim = await make_sim("--runner", "pooling", "--convert", "embed")
    return running


async def tokens(sim: RunningSim, text: str) -> int:
    return int((await sim.client.post("/tokenize", json={"prompt": text})).json()["count"])


@pytest.mark.parametrize(
    ("first", "second"),
    [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")],
)
async def test_score_takes_every_field_pair(embed: RunningSim, first: str, second: str) -> None:
    """Each of ScoreRequest's four shapes scores one query against each document (1:N)."""
    response = await embed.client.post("/score", json={first: "hello", second: DOCS[:2]})
    body = response.json()
    assert response.status_code == 200
    assert list(body) == ["id", "object", "created", "model", "data", "usage"]
    assert body["id"].startswith("score-")
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "score"), (1, "score")]
    assert all(-1 <= d["score"] <= 1 for d in body["data"])


async def test_score_pairings_and_usage(embed: RunningSim) -> None:
    """1:1, 1:N and N:N pair up as vLLM pairs them; bi-encoder usage counts each text once;
    /score and /v1/score answer alike."""
    one = (await embed.client.post("/score", json={"text_1": "hello", "text_2": "world"})).json()
    n_n = (
        await embed.client.post(
            "/v1/score", json={"text_1": ["hello", "foo"], "text_2": ["world", "bar"]}
        )
    ).json()
    one_n = (await embed.client.post("/score", json={"text_1": "hello", "text_2": DOCS})).json()
    assert len(one["data"]) == 1 and len(n_n["data"]) == 2 and len(one_n["data"]) == 3
    expected = sum([await tokens(embed, t) for t in ("hello", *DOCS)])
    assert one_n["usage"]["prompt_tokens"] == expected
    assert one_n["data"][0]["score"] == pytest.approx(one["data"][0]["score"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"text_1": ["a", "b"], "text_2": ["x", "y", "z"]},
            "Input lengths must be either 1:1, 1:N or N:N",
        ),
        ({"text_1": [], "text_2": ["x"]}, "At least one text element must be given"),
        ({"text_1": "a", "text_2": []}, "At least one text_pair element must be given"),
        ({"text_1": "a", "text_2": [{"content": []}]}, "MultiModalParam is not supported"),
        ({"text_1": "a", "text_2": ["hello world " * 300]}, "maximum context length is 1024"),
    ],
)
async def test_score_refusals(embed: RunningSim, body: dict[str, object], message: str) -> None:
    """vLLM 0.32's 400s for pairs it cannot score."""
    response = await embed.client.post("/score", json=body)
    assert response.status_code == 400 and message in response.json()["error"]["message"]


async def test_score_without_inputs_names_each_shape(embed: RunningSim) -> None:
    """No pair of fields: pydantic's union error, one missing field per shape."""
    response = await embed.client.post("/score", json={"queries": "a"})
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "Bad Request"
    assert error["message"].startswith("6 validation errors:")


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
async def test_rerank_sorts_and_cuts(embed: RunningSim, path: str) -> None:
    """Results best first, each with its document; `top_n` keeps the best N; usage counts
    the query and each document once."""
    full = (await embed.client.post(path, json={"query": "hello", "documents": DOCS})).json()
    top = (
        await embed.client.post(path, json={"query": "hello", "documents": DOCS, "top_n": 1})
    ).json()
    assert list(full) == ["id", "model", "usage", "results"]
    assert list(full["usage"]) == ["prompt_tokens", "total_tokens"]
    scores = [r["relevance_score"] for r in full["results"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3
    assert {r["document"]["text"] for r in full["results"]} == set(DOCS)
    assert full["results"][0]["document"] == {
        "text": DOCS[full["results"][0]["index"]],
        "multi_modal": None,
    }
    assert top["results"] == full["results"][:1]


async def test_rerank_refusals(embed: RunningSim) -> None:
    """No documents, or no query: 400s as vLLM's."""
    empty = await embed.client.post("/rerank", json={"query": "a", "documents": []})
    no_query = await embed.client.post("/rerank", json={"documents": ["a"]})
    assert empty.status_code == 400 and "text_pair" in empty.json()["error"]["message"]
    assert no_query.status_code == 400 and no_query.json()["error"]["param"] == "body.query"


async def test_cross_encoder(make_sim: SimFactory) -> None:
    """A one-label classifier (`--convert classify --hf-overrides {"num_labels": 1}`) scores
    each pair's joint prompt: scores are probabilities, usage counts each pair's tokens."""
    sim = await make_sim("--convert", "classify", "--hf-overrides", '{"num_labels": 1}')
    scored = (await sim.client.post("/score", json={"text_1": "hello", "text_2": DOCS[:2]})).json()
    assert all(0 < d["score"] < 1 for d in scored["data"])
    # <s>hello<s>world: each pair is both texts with their BOS tokens.
    pairs = [await tokens(sim, "hello") + await tokens(sim, d) for d in DOCS[:2]]
    assert scored["usage"]["prompt_tokens"] == sum(pairs)
    classified = (await sim.client.post("/classify", json={"input": "hi"})).json()
    assert classified["data"][0]["num_classes"] == 1


async def test_llm_reranker_joins_the_texts(make_sim: SimFactory) -> None:
    """A head built from token rows (`from_2_way_softmax`) scores `query + document` as one
    text: usage counts each joined text's tokens."""
    overrides = '{"method": "from_2_way_softmax", "classifier_from_token": ["he", "ll"]}'
    sim = await make_sim("--convert", "classify", "--hf-overrides", overrides)
    scored = (await sim.client.post("/score", json={"text_1": "hello", "text_2": DOCS[:2]})).json()
    joined = [await tokens(sim, "hello" + d) for d in DOCS[:2]]
    assert scored["usage"]["prompt_tokens"] == sum(joined)
