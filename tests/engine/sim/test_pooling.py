"""A pooling simulator (`--runner pooling`, `--convert embed|classify`): what it serves, its
answers' shapes and usage, its errors, faults and metrics."""

from __future__ import annotations

import base64
import json
import struct
import time

import httpx
import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory

LONG = "hello world " * 300  # 1,202 tokens with BOS: past max_model_len 1024
USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
]


@pytest.fixture
async def embed(make_sim: SimFactory) -> RunningSim:
    """A simulated embedding model (vLLM's `--runner pooling`: `--convert embed`)."""
    running: RunningSim = await make_sim("--runner", "pooling")
    return running


async def test_embeddings_of_a_string(embed: RunningSim) -> None:
    """One input: one unit vector of hidden_size floats; usage counts its tokens only."""
    response = await embed.client.post("/v1/embeddings", json={"model": "tiny", "input": "hi"})
    body = response.json()
    assert response.status_code == 200
    assert list(body) == ["id", "object", "created", "model", "data", "usage"]
    assert body["id"].startswith("embd-") and body["object"] == "list"
    [item] = body["data"]
    assert item["index"] == 0 and item["object"] == "embedding" and len(item["embedding"]) == 128
    assert abs(sum(x * x for x in item["embedding"]) - 1) < 1e-9
    assert list(body["usage"]) == USAGE_KEYS
    count = (await embed.client.post("/tokenize", json={"prompt": "hi"})).json()["count"]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == count == 2


async def test_embeddings_inputs_of_every_shape(embed: RunningSim) -> None:
    """Strings, token ids and lists of token ids: one vector per prompt, the same prompt the
    same vector whichever way it came."""
    ids = (await embed.client.post("/tokenize", json={"prompt": "hello world"})).json()["tokens"]
    shapes = {
        "string": "hello world",
        "strings": ["hello world", "foo"],
        "token_ids": ids,
        "token_id_lists": [ids, [1, 82]],
    }
    vectors = {}
    for name, value in shapes.items():
        body = (await embed.client.post("/v1/embeddings", json={"input": value})).json()
        vectors[name] = [item["embedding"] for item in body["data"]]
    assert [len(v) for v in vectors.values()] == [1, 2, 1, 2]
    assert vectors["string"][0] == vectors["strings"][0] == vectors["token_ids"][0]
    assert vectors["strings"][0] != vectors["strings"][1]


async def test_embeddings_of_a_chat(embed: RunningSim) -> None:
    """`messages` (or a conversation in `input`) is rendered by the chat template without a
    generation prompt and embedded as one prompt."""
    messages = [{"role": "user", "content": "hello"}]
    by_messages = (await embed.client.post("/v1/embeddings", json={"messages": messages})).json()
    by_input = (await embed.client.post("/v1/embeddings", json={"input": messages})).json()
    tokenized = await embed.client.post(
        "/tokenize", json={"messages": messages, "add_generation_prompt": False}
    )
    assert by_messages["data"] == by_input["data"]
    assert by_messages["usage"]["prompt_tokens"] == tokenized.json()["count"]


async def test_base64_and_bytes_encodings(embed: RunningSim) -> None:
    """`encoding_format` base64 is the float32 vector's little-endian bytes; bytes answers
    them raw with a `metadata` header."""
    floats = (await embed.client.post("/v1/embeddings", json={"input": "hi"})).json()
    b64 = (
        await embed.client.post("/v1/embeddings", json={"input": "hi", "encoding_format": "base64"})
    ).json()
    decoded = struct.unpack("<128f", base64.b64decode(b64["data"][0]["embedding"]))
    assert decoded == pytest.approx(floats["data"][0]["embedding"], abs=1e-6)
    raw = await embed.client.post(
        "/v1/embeddings", json={"input": ["a", "b"], "encoding_format": "bytes"}
    )
    metadata = json.loads(raw.headers["metadata"])
    assert raw.headers["content-type"] == "application/octet-stream" and len(raw.content) == 1024
    assert [(d["start"], d["end"]) for d in metadata["data"]] == [(0, 512), (512, 1024)]


async def test_cohere_embed(embed: RunningSim) -> None:
    """/v2/embed answers Cohere's shape: embeddings by type, texts echoed, billed tokens."""
    response = await embed.client.post(
        "/v2/embed", json={"texts": ["hello", "foo"], "embedding_types": ["float", "binary"]}
    )
    body = response.json()
    assert list(body) == ["id", "embeddings", "texts", "meta", "response_type"]
    assert len(body["embeddings"]["float"][0]) == 128 and len(body["embeddings"]["binary"][0]) == 16
    assert body["texts"] == ["hello", "foo"] and body["response_type"] == "embeddings_by_type"
    assert body["meta"]["billed_units"] == {"input_tokens": 4 + 3, "image_tokens": 0}


async def test_cohere_truncates_unless_told_not_to(embed: RunningSim) -> None:
    """`truncate` END (the default) embeds a long text cut to the context; NONE refuses it."""
    cut = (await embed.client.post("/v2/embed", json={"texts": [LONG]})).json()
    refused = await embed.client.post("/v2/embed", json={"texts": [LONG], "truncate": "NONE"})
    assert cut["meta"]["billed_units"]["input_tokens"] == 1024
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input_tokens"


async def test_pooling_endpoint_and_tasks(embed: RunningSim) -> None:
    """/pooling answers the model's own task; another supported one is refused as vLLM
    refuses it; an embedding model does not serve /classify."""
    pooled = (await embed.client.post("/pooling", json={"input": "hi"})).json()
    other = await embed.client.post("/pooling", json={"input": "hi", "task": "token_embed"})
    classify = await embed.client.post("/classify", json={"input": "hi"})
    assert pooled["id"].startswith("pooling-") and pooled["data"][0]["object"] == "pooling"
    assert other.status_code == 400 and other.json()["error"]["param"] == "task"
    assert classify.status_code == 404 and classify.json() == {"detail": "Not Found"}


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ({"input": LONG}, 400, "input_tokens", "contains at least 1025 input tokens"),
        ({"input": ["hi", LONG]}, 400, "input_tokens", "maximum context length is 1024"),
        ({"input": [1, 5000]}, 400, None, "Token id 5000 is out of vocabulary"),
        ({"input": [[1, 2], [2048]]}, 400, None, "Token id 2048 is out of vocabulary"),
        ({"input": []}, 400, None, "You must pass at least one prompt"),
        ({"input": "hi", "dimensions": 16}, 400, None, "does not support Matryoshka"),
        ({}, 400, "body.input", "Field required"),
        ({"input": "hi", "truncate_prompt_tokens": 2000}, 400, None, "greater than max_model_len"),
        ({"input": "hi", "normalize": True}, 400, "normalize", "use `use_activation`"),
    ],
)
async def test_embeddings_refusals(
    embed: RunningSim, body: dict[str, object], status: int, param: str | None, message: str
) -> None:
    """Each refusal in vLLM 0.32's error shape, status and param."""
    response = await embed.client.post("/v1/embeddings", json=body)
    error = response.json()["error"]
    assert response.status_code == status == error["code"]
    assert error["param"] == param and message in error["message"]


async def test_truncation_keeps_a_long_prompt_in(embed: RunningSim) -> None:
    """`truncate_prompt_tokens` keeps the first N tokens (-1: the whole context)."""
    for truncate, tokens in ((100, 100), (-1, 1024)):
        body = {"input": LONG, "truncate_prompt_tokens": truncate}
        answer = (await embed.client.post("/v1/embeddings", json=body)).json()
        assert answer["usage"]["prompt_tokens"] == tokens


async def test_not_json_is_refused(embed: RunningSim) -> None:
    """A body that is not application/json is a 400 before it is read."""
    response = await embed.client.post("/v1/embeddings", content=b"input=hi")
    assert response.status_code == 400 and "Unsupported Media Type" in response.text


async def test_unknown_model_is_a_404_without_the_names(embed: RunningSim) -> None:
    """vLLM 0.32's pooling endpoints refuse an unknown `model` with their own 404 (no served
    names, no param), after the body's types and before its prompts are read."""
    response = await embed.client.post("/v1/embeddings", json={"model": "nope", "input": "hi"})
    error = response.json()["error"]
    assert response.status_code == 404 and error["type"] == "NotFoundError"
    assert error["message"] == "The model `nope` does not exist." and error["param"] is None
    typed = await embed.client.post("/v1/embeddings", json={"model": "nope", "input": 5})
    assert typed.status_code == 400


async def test_generation_paths_are_not_served(embed: RunningSim) -> None:
    """A pooling model has no chat or completions: FastAPI's 404."""
    for path in ("/v1/chat/completions", "/v1/completions"):
        response = await embed.client.post(path, json={"prompt": "hi"})
        assert response.status_code == 404 and response.json() == {"detail": "Not Found"}


async def test_generate_model_serves_no_pooling(sim: RunningSim) -> None:
    """The default (generate) simulator answers every pooling path with FastAPI's 404."""
    paths = ("/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank")
    for path in (*paths, "/v1/rerank", "/v2/rerank", "/v2/embed"):
        response = await sim.client.post(path, json={"input": "hi"})
        assert response.status_code == 404 and response.json() == {"detail": "Not Found"}


async def test_classify_model(make_sim: SimFactory) -> None:
    """`--convert classify`: /classify answers labels and probabilities, /pooling the
    probabilities; no embeddings, and no scoring with two labels."""
    sim = await make_sim("--convert", "classify")
    answer = (await sim.client.post("/classify", json={"input": ["hi", "there"]})).json()
    pooled = (await sim.client.post("/pooling", json={"input": "hi"})).json()
    first = answer["data"][0]
    assert list(first) == ["index", "label", "probs", "num_classes"]
    assert first["num_classes"] == 2 and sum(first["probs"]) == pytest.approx(1)
    assert first["label"] == f"LABEL_{first['probs'].index(max(first['probs']))}"
    assert pooled["data"][0]["data"] == first["probs"]
    for path in ("/v1/embeddings", "/score", "/rerank"):
        assert (await sim.client.post(path, json={"input": "hi"})).status_code == 404


async def test_pooling_metrics_count_prompts_not_generation(embed: RunningSim) -> None:
    """Each input is an engine request: prompt tokens and successes (`stop`) counted, no
    generation tokens."""
    await embed.client.post("/v1/embeddings", json={"input": ["hello world", "foo"]})
    text = (await embed.client.get("/metrics")).text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 8.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 0.0' in text
    success = 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"}'
    assert f"{success} 2.0" in text


async def test_faults_apply_to_pooling(embed: RunningSim) -> None:
    """x-sim-fault works on the pooling paths: an error status, the `sim_fault` field."""
    by_header = await embed.client.post(
        "/v1/embeddings", json={"input": "hi"}, headers={"x-sim-fault": "error:503"}
    )
    by_field = await embed.client.post(
        "/score", json={"text_1": "a", "text_2": "b", "sim_fault": "error:500"}
    )
    assert by_header.status_code == 503 and by_field.status_code == 500


async def test_hang_and_die_after_on_pooling(embed: RunningSim) -> None:
    """`hang` never answers (the engine holds nothing once the client leaves); `die-after:0`
    drops the connection."""
    with pytest.raises(httpx.ReadTimeout):
        await embed.client.post(
            "/v1/embeddings", json={"input": "hi"}, headers={"x-sim-fault": "hang"}, timeout=0.3
        )
    with pytest.raises(httpx.RemoteProtocolError):
        await embed.client.post(
            "/v1/embeddings", json={"input": "hi"}, headers={"x-sim-fault": "die-after:0"}
        )
    assert embed.server.engine.num_running == embed.server.engine.num_waiting == 0


async def test_each_input_takes_a_seat(make_sim: SimFactory) -> None:
    """Each input of a batch is its own engine request: with one seat and 100 ms steps, three
    inputs take at least three steps."""
    sim = await make_sim("--runner", "pooling", "--max-num-seqs", "1", "--step-base-ms", "100")
    started = time.monotonic()
    response = await sim.client.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
    assert response.status_code == 200 and time.monotonic() - started >= 0.29


async def test_answers_name_the_adapter_asked_for(make_sim: SimFactory) -> None:
    """A LoRA adapter's name is answered as asked; any served name answers as the first."""
    sim = await make_sim(
        "--runner", "pooling", "--served-model-name", "tiny", "alias", "--lora-modules", "ad=/x"
    )
    for asked, named in (("ad", "ad"), ("alias", "tiny"), (None, "tiny")):
        body = (
            await sim.client.post("/v1/embeddings", json={"model": asked, "input": "hi"})
        ).json()
        assert body["model"] == named
