"""A route no model here serves, through a real `llmd serve` over a simulated chat engine
(no speech-to-text) and an embedding engine: the 400 unsupported_endpoint says what kind of
model would serve it, not a pooling engine for every route."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.audio import silence_wav
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model

CHAT, EMBED = "tiny", "tiny-embed"


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    engines = {"chat": (CHAT, []), "embed": (EMBED, ["--runner", "pooling", "--convert", "embed"])}
    with LlmdProcess.running(multi_sim_config(ensure_tiny_model(), engines)) as running:
        yield running


def test_classify_of_an_embedding_model_names_a_classification_model(llmd: LlmdProcess) -> None:
    """/classify of the embedding model (vLLM has no such route for it): the refusal names a
    classification model, not the pooling runner the model already runs on."""
    refused = httpx.post(llmd.base_url + "/classify", json={"model": EMBED, "input": "hi"})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unsupported_endpoint"
    assert "--convert classify" in error["message"], error["message"]


def test_audio_of_a_chat_model_names_a_speech_to_text_model(llmd: LlmdProcess) -> None:
    """A transcription of the chat model (its engine has no audio route): the refusal names a
    speech-to-text model, not a pooling engine (which never serves audio)."""
    refused = httpx.post(
        llmd.base_url + "/v1/audio/transcriptions",
        files={"file": ("a.wav", silence_wav(), "audio/wav")},
        data={"model": CHAT},
    )
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "speech-to-text" in message and "--runner pooling" not in message, message
