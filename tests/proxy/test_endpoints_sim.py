"""Every endpoint through a real `llmd serve` over two simulated engines (a chat model that also
transcribes, `--sim-asr`, and a pooling model, `--runner pooling`): the official openai client
for embeddings, models and audio, httpx for the rest; a route the engine lacks is llmd's 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.audio import silence_wav
from tests.support.configs import multi_sim_config
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

CHAT, EMBED = "tiny", "tiny-embed"


WAV = silence_wav()


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    engines = {
        "chat": (CHAT, ["--sim-asr"]),
        "embed": (EMBED, ["--runner", "pooling", "--convert", "embed"]),
    }
    with LlmdProcess.running(multi_sim_config(ensure_tiny_model(), engines)) as running:
        yield running


@pytest.fixture
def client(llmd: LlmdProcess) -> Iterator[openai.OpenAI]:
    """The openai client at llmd, closed after the test (its pool's sockets with it)."""
    with openai.OpenAI(base_url=llmd.base_url + "/v1", api_key="unused") as opened:
        yield opened


def test_embeddings_and_model_cards_through_the_openai_client(client: openai.OpenAI) -> None:
    """`embeddings.create` (texts and token ids) gets a vector per input and the engine's
    usage; both models are listed; `models.retrieve` gives a card with context_length."""
    answer = client.embeddings.create(model=EMBED, input=["one", "two three"])
    assert [d.index for d in answer.data] == [0, 1] and answer.usage.prompt_tokens > 0
    ids = client.embeddings.create(model=EMBED, input=[[5, 6, 7]])
    assert len(ids.data[0].embedding) == len(answer.data[0].embedding)
    assert {m.id for m in client.models.list().data} == {CHAT, EMBED}
    card = client.models.retrieve(EMBED).model_extra
    assert card is not None and card["context_length"] == card["max_model_len"] == 1024


def test_scoring_pooling_and_cohere_answer(llmd: LlmdProcess) -> None:
    """rerank (three paths), score, pooling and /v2/embed answer 200; /classify, which an
    embedding engine does not register, is llmd's 400 unsupported_endpoint."""
    documents = ["a ledger", "a poem"]
    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
        body = {"model": EMBED, "query": "ledger", "documents": documents, "top_n": 1}
        answer = httpx.post(llmd.base_url + path, json=body)
        assert answer.status_code == 200, answer.text
    for path, body in [
        ("/score", {"model": EMBED, "queries": "ledger", "documents": documents}),
        ("/pooling", {"model": EMBED, "input": "hello"}),
        ("/v2/embed", {"model": EMBED, "texts": ["hello"]}),
    ]:
        assert httpx.post(llmd.base_url + path, json=body).status_code == 200, path
    refused = httpx.post(llmd.base_url + "/classify", json={"model": EMBED, "input": "hi"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_endpoint"


def test_audio_through_the_openai_client(client: openai.OpenAI, llmd: LlmdProcess) -> None:
    """`audio.transcriptions.create` gets the engine's text; a streamed transcription comes
    through as events ending with [DONE]; the embedding model refuses audio by kind."""
    text = client.audio.transcriptions.create(model=CHAT, file=("a.wav", WAV, "audio/wav"))
    assert text.text
    with httpx.stream(
        "POST",
        llmd.base_url + "/v1/audio/transcriptions",
        files={"file": ("a.wav", WAV, "audio/wav")},
        data={"model": CHAT, "stream": "true"},
    ) as answer:
        body = answer.read()
    assert answer.status_code == 200 and body.rstrip().endswith(b"data: [DONE]")
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.transcriptions.create(model=EMBED, file=("a.wav", WAV, "audio/wav"))
    assert refused.value.body["code"] == "unsupported_endpoint"  # type: ignore[index]


def test_tokenize_answers_as_the_engine_would(llmd: LlmdProcess) -> None:
    """llmd's own /tokenize and /detokenize give what the engine's (the simulator's, which
    tokenizes as vLLM does) give for the same body."""
    socket = llmd.runtime_dir / "engine-chat.sock"
    body = {"model": CHAT, "prompt": "Hello there", "return_token_strs": True}
    ours = httpx.post(llmd.base_url + "/tokenize", json=body).json()
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket))) as engine:
        assert ours == engine.post("http://engine/tokenize", json=body).json()
        tokens = {"model": CHAT, "tokens": ours["tokens"]}
        theirs = engine.post("http://engine/detokenize", json=tokens).json()
    assert httpx.post(llmd.base_url + "/detokenize", json=tokens).json() == theirs


def prompt_tokens_counted(llmd: LlmdProcess, endpoint: str) -> float:
    """llmd's `llmd_prompt_tokens_total` for `endpoint` (anonymous tenant), from /metrics."""
    text = httpx.get(llmd.base_url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llmd_prompt_tokens_total" and sample.labels == {
                "tenant": "anonymous", "endpoint": endpoint,
            }:  # fmt: skip
                return sample.value
    return 0.0


def test_embeddings_inputs_are_accounted_as_the_engine_counted_them(llmd: LlmdProcess) -> None:
    """An input llmd does not tokenize (its byte bound fits the window) is accounted with the
    engine's `usage.prompt_tokens`, not the bound: the prompt tokens llmd counts rise by it."""
    text = "hello world " * 20  # 240 bytes: a bound of 241, far above its tokens
    before = prompt_tokens_counted(llmd, "embeddings")
    answer = httpx.post(llmd.base_url + "/v1/embeddings", json={"model": EMBED, "input": text})
    assert answer.status_code == 200, answer.text
    used = answer.json()["usage"]["prompt_tokens"]
    assert 0 < used < len(text)
    assert wait_for(lambda: prompt_tokens_counted(llmd, "embeddings") - before == used, 10)


def test_every_input_of_an_embeddings_request_is_counted_once_on_either_path(
    llmd: LlmdProcess,
) -> None:
    """Several inputs: the prompt tokens llmd counts rise by the engine's whole usage, whether
    validation bounded the inputs (`float`) or tokenized them (`bytes`, whose body has no
    usage), not by the longest input's count."""
    inputs = ["hello world " * 4, "a b c d e f g h", "hi"]
    for encoding in ("float", "bytes"):
        before = prompt_tokens_counted(llmd, "embeddings")
        body = {"model": EMBED, "input": inputs, "encoding_format": encoding}
        answer = httpx.post(llmd.base_url + "/v1/embeddings", json=body)
        assert answer.status_code == 200, answer.text
        if encoding == "bytes":  # the layout of the body and its usage come in a header
            used = json.loads(answer.headers["metadata"])["usage"]["prompt_tokens"]
        else:
            used = answer.json()["usage"]["prompt_tokens"]
        counted = before + used
        assert wait_for(lambda c=counted: prompt_tokens_counted(llmd, "embeddings") == c, 10)
