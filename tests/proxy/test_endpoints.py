"""Every endpoint of the table through llmd's proxy (a fake engine behind it, real sockets):
routed, never `no route`; refused by kind with the models that serve it; pooling inputs
checked against the context; tokenize and detokenize answered by llmd's own tokenizer; one
model's card."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from llmd.admission.tenants import ANONYMOUS, Tenant
from llmd.endpoints.dialects import ANTHROPIC
from llmd.endpoints.table import ENDPOINTS, Answer, BodyKind, EngineKind, by_path
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import TextPrompt
from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.lazy_import import lazy_module
from tests.support.transformers_reference import transformers

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

MAX_MODEL_LEN = 64
POOLING_PATHS = tuple(
    path for e in ENDPOINTS if e.engine_kinds == {EngineKind.POOLING} for path in e.paths
)
# A body each endpoint takes (a short text input for each).
BODIES = {
    "chat": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "responses": {"input": "hi", "max_output_tokens": 2},
    "responses_input_tokens": {"input": "hi"},
    "completions": {"prompt": "hi", "max_tokens": 2},
    "messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "count_tokens": {"messages": [{"role": "user", "content": "hi"}]},
    "embeddings": {"input": ["one text", "another"]},
    "pooling": {"input": "one text"},
    "classify": {"input": ["one text"]},
    "embed_v2": {"texts": ["one text"], "input_type": "search_document"},
    "score": {"queries": "a query", "documents": ["one", "two"]},
    "rerank": {"query": "a query", "documents": ["one", "two"], "top_n": 1},
    "tokenize": {"prompt": "hello there"},
    "detokenize": {"tokens": [1, 2, 3]},
    "transcriptions": {"language": "en"},
    "translations": {},
}
# The worker of the tests that import transformers (tests/support/xdist_groups.py).
pytestmark = pytest.mark.xdist_group("transformers")


@pytest.fixture(scope="module")
def generate(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyStack]:
    """llmd before a generate engine (the fake registers only chat, completions, tokenize)."""
    runtime = Path(tmp_path_factory.mktemp("run"))
    with ProxyStack.run(tiny_model_dir, runtime, MAX_MODEL_LEN) as running:
        yield running


@pytest.fixture(scope="module")
def pooling(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    """llmd before a pooling engine (`--runner pooling`; the fake registers vLLM's pooling
    routes)."""
    runtime = Path(tmp_path_factory.mktemp("run"))
    engine = FakeEngine(pooling_paths=POOLING_PATHS)
    args = ("--runner", "pooling", "--convert", "embed")
    with ProxyStack.run(
        tiny_model_dir, runtime, MAX_MODEL_LEN, engine=engine, engine_args=args
    ) as s:
        yield s


def post(stack: ProxyStack, path: str, body: dict[str, object]) -> httpx.Response:
    """`body` as JSON, or as a form with an audio file for an endpoint that takes forms."""
    stack.engine.received.clear()
    stack.engine.forms.clear()
    if by_path()[path].body is BodyKind.MULTIPART:
        files = {"file": ("a.wav", b"RIFF" + bytes(100), "audio/wav")}
        data = {"model": "tiny", **{k: str(v) for k, v in body.items()}}
        return httpx.post(stack.base_url + path, files=files, data=data, timeout=30)
    return httpx.post(stack.base_url + path, json={"model": "tiny", **body}, timeout=30)


@pytest.mark.parametrize("path", [p for e in ENDPOINTS for p in e.paths])
def test_every_path_of_the_table_is_served_by_the_engine_kind_it_names(
    generate: ProxyStack, pooling: ProxyStack, path: str
) -> None:
    """Each path reaches an engine of a kind that serves it (or llmd's tokenizer answers it)
    with the client's body, and an engine of the other kind's model gets 400
    unsupported_endpoint: never llmd's `no route`."""
    endpoint = next(e for e in ENDPOINTS if path in e.paths)
    body = BODIES[endpoint.name]
    serving = pooling if EngineKind.POOLING in endpoint.engine_kinds else generate
    answer = post(serving, path, body)
    assert answer.status_code == 200, answer.text
    if endpoint.body is BodyKind.MULTIPART:
        assert [form[0] for form in serving.engine.forms] == [path]
    elif endpoint.answer is Answer.RELAY:
        received = serving.engine.received
        if endpoint.stored:  # llmd keeps the Responses store and names the response itself
            assert received[0][1].pop("request_id").startswith("resp_")
            body = {**body, "store": False}
        assert received == [(path, {"model": "tiny", **body})]
    else:
        assert serving.engine.received == []  # answered by llmd's tokenizer
    if endpoint.engine_kinds != {EngineKind.POOLING, EngineKind.GENERATE}:
        other = generate if serving is pooling else pooling
        refused = post(other, path, body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        if endpoint.dialect is ANTHROPIC:  # Anthropic's shape: a type, no code or param
            assert refused.json()["type"] == "error"
            assert error["type"] == "invalid_request_error"
        else:
            assert error["code"] == "unsupported_endpoint" and error["param"] == "model"
        assert path in error["message"] and other.engine.received == other.engine.forms == []


def test_a_pooling_input_over_the_context_is_refused_naming_it(pooling: ProxyStack) -> None:
    """An embeddings list whose second input is longer than the window: 400
    context_length_exceeded naming input[1] and its count; token ids past the vocabulary:
    400; neither reaches the engine."""
    long = "word " * 200
    answer = post(pooling, "/v1/embeddings", {"input": ["short", long]})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "input[1]" in error["message"] and f"{MAX_MODEL_LEN} tokens" in error["message"]
    past = post(pooling, "/v1/embeddings", {"input": [[1, 2, 10**6]]})
    assert past.status_code == 400 and "out of vocabulary" in past.json()["error"]["message"]
    over = post(pooling, "/rerank", {"query": "q", "documents": ["ok", long]})
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"
    assert pooling.engine.received == []


def test_tokenize_and_detokenize_are_answered_by_llmds_tokenizer(
    generate: ProxyStack, tiny_model_dir: Path
) -> None:
    """/tokenize gives vLLM's answer (count, max_model_len, tokens, token_strs) from the
    model's own tokenizer, for a prompt and for messages; /detokenize its text; an id past
    the vocabulary is a 400; the engine is never asked."""
    tokenizer = transformers().AutoTokenizer.from_pretrained(str(tiny_model_dir))
    answer = post(generate, "/tokenize", {"prompt": "hello there", "return_token_strs": True})
    ids = tokenizer("hello there")["input_ids"]
    assert answer.json() == {
        "count": len(ids),
        "max_model_len": MAX_MODEL_LEN,
        "tokens": ids,
        "token_strs": tokenizer.convert_ids_to_tokens(ids),
    }
    messages = [{"role": "user", "content": "hi"}]
    chat = post(generate, "/tokenize", {"messages": messages, "add_generation_prompt": True})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat.json()["tokens"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    back = post(generate, "/detokenize", {"tokens": ids})
    assert back.json() == {"prompt": tokenizer.decode(ids)}
    past = post(generate, "/detokenize", {"tokens": [10**6]})
    assert past.status_code == 400 and past.json()["error"]["param"] == "tokens"
    assert generate.engine.received == [] and generate.engine.tokenized == []


def test_one_models_card_and_the_list_carry_context_length(generate: ProxyStack) -> None:
    """The openai client's `models.retrieve` gets the model's card (with `context_length`
    beside `max_model_len`); an unknown id gets llmd's OpenAI 404 model_not_found."""
    generate.engine_state.cards = {
        "tiny": {"id": "tiny", "object": "model", "max_model_len": MAX_MODEL_LEN, "root": "/m"}
    }
    client = openai.OpenAI(base_url=generate.base_url + "/v1", api_key="unused")
    card = client.models.retrieve("tiny")
    assert card.id == "tiny" and card.model_extra is not None
    assert card.model_extra["context_length"] == card.model_extra["max_model_len"] == 64
    assert client.models.list().data[0].model_extra["context_length"] == 64  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    client.close()
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_an_engine_without_the_route_is_an_unsupported_endpoint(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """An engine whose flags say pooling but that has no such route (vLLM answers FastAPI's
    404 `{"detail": "Not Found"}`): the client gets llmd's 400 unsupported_endpoint."""
    engine = FakeEngine(pooling_paths=())
    args = ("--runner", "pooling")
    with ProxyStack.run(
        tiny_model_dir, tmp_path, MAX_MODEL_LEN, engine=engine, engine_args=args
    ) as s:
        answer = post(s, "/v1/embeddings", BODIES["embeddings"])
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unsupported_endpoint" and "/v1/embeddings" in error["message"]


def test_agents_probes_are_answered(generate: ProxyStack) -> None:
    """`HEAD /` and `GET /` answer 200 (Claude Code probes them); `GET /v1/models` with
    `anthropic-version` answers in Anthropic's list shape, OpenAI's without it."""
    generate.engine_state.cards = {
        "tiny": {"id": "tiny", "object": "model", "created": 0, "max_model_len": MAX_MODEL_LEN}
    }
    assert httpx.head(generate.base_url + "/").status_code == 200
    assert httpx.get(generate.base_url + "/").status_code == 200
    listing = httpx.get(
        generate.base_url + "/v1/models", headers={"anthropic-version": "2023-06-01"}
    ).json()
    assert listing == {
        "data": [
            {
                "type": "model",
                "id": "tiny",
                "display_name": "tiny",
                "created_at": "1970-01-01T00:00:00Z",
                "max_model_len": MAX_MODEL_LEN,
            }
        ],
        "has_more": False,
        "first_id": "tiny",
        "last_id": "tiny",
    }
    assert httpx.get(generate.base_url + "/v1/models").json()["object"] == "list"


def test_messages_pass_anthropic_s_headers_on_and_keep_the_key(generate: ProxyStack) -> None:
    """A Messages request's `anthropic-version` and `anthropic-beta` reach the engine with
    the body; its key (`x-api-key`, `Authorization`) does not; `?beta=true` is the same
    route."""
    generate.engine.message_headers.clear()
    headers = {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "context-management-2025-06-27",
        "x-api-key": "sk-client",
        "authorization": "Bearer sk-client",
    }
    body = {"model": "tiny", **BODIES["messages"]}
    answer = httpx.post(
        generate.base_url + "/v1/messages?beta=true", json=body, headers=headers, timeout=30
    )
    assert answer.status_code == 200, answer.text
    (seen,) = generate.engine.message_headers
    seen = {k.lower(): v for k, v in seen.items()}
    assert seen["anthropic-version"] == "2023-06-01"
    assert seen["anthropic-beta"] == "context-management-2025-06-27"
    assert "x-api-key" not in seen and "authorization" not in seen


def test_a_tenant_with_a_token_budget_is_charged_its_inputs_exact_count(
    pooling: ProxyStack, tiny_model_dir: Path
) -> None:
    """Embeddings inputs whose bound fits the window are not tokenized, unless the tenant has
    a token budget: then it is charged their exact count (the tokens left say so), not the
    bound."""
    inputs = ["hello world " * 3, "another text"]
    counter = LocalCounter.load(str(tiny_model_dir))
    exact = sum(counter.count_now(TextPrompt(inputs, True, "input")))
    assert exact < sum(len(text) + 1 for text in inputs)  # the bound is larger
    budgets = pooling.ctx.admission.budgets
    budgets.configure([Tenant(ANONYMOUS, input_tokens_per_minute=1_000)], time.time())
    try:
        answer = post(pooling, "/v1/embeddings", {"input": inputs})
    finally:
        budgets.configure([], time.time())
    assert answer.status_code == 200, answer.text
    left = int(answer.headers["x-ratelimit-remaining-tokens"])
    assert 1_000 - exact <= left < 1_000 - exact + 10  # refilled meanwhile: 17 a second
