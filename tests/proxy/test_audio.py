"""Audio uploads through llmd's proxy (a fake engine behind it, real sockets): the form goes
to the engine byte for byte with its own Content-Type, routed by its `model` field, streamed
or not; a bad form is a 400 or 413 in OpenAI's shape and never reaches the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support.fake_engine import ProxyStack
from tests.support.lazy_import import lazy_module

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

WAV = b"RIFF" + bytes(4000)  # the fake engine does not decode it
URL = "/v1/audio/transcriptions"


@pytest.fixture(scope="module")
def stack(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    runtime = Path(tmp_path_factory.mktemp("run"))
    with ProxyStack.run(tiny_model_dir, runtime, 1024) as running:
        yield running


def test_the_openai_client_transcribes_through_llmd(stack: ProxyStack) -> None:
    """`audio.transcriptions.create` (the official client, a multipart upload) gets the
    engine's answer; the engine got the client's exact bytes and Content-Type."""
    stack.engine.forms.clear()
    with openai.OpenAI(base_url=stack.base_url + "/v1", api_key="unused") as client:
        answer = client.audio.transcriptions.create(model="tiny", file=("a.wav", WAV, "audio/wav"))
    assert answer.text == "hello there"
    ((path, content_type, raw),) = stack.engine.forms
    assert path == URL and content_type.startswith("multipart/form-data; boundary=")
    assert WAV in raw and b'name="model"' in raw


def test_a_streamed_transcription_is_relayed_as_events(stack: ProxyStack) -> None:
    """`stream=true` as a form field: the engine's server-sent events come through."""
    files = {"file": ("a.wav", WAV, "audio/wav")}
    with httpx.stream(
        "POST", stack.base_url + URL, files=files, data={"model": "tiny", "stream": "true"}
    ) as answer:
        body = answer.read()
    assert answer.status_code == 200 and answer.headers["content-type"] == "text/event-stream"
    assert body.endswith(b"data: [DONE]\n\n") and b"transcription.chunk" in body


@pytest.mark.parametrize(
    ("files", "data", "param"),
    [
        ({"other": ("a.wav", WAV)}, {"model": "tiny"}, "file"),
        ({"file": ("a.wav", b"")}, {"model": "tiny"}, "file"),
        ({"file": ("a.wav", WAV)}, {}, "model"),
        ({"file": ("a.wav", WAV)}, {"model": "tiny", "stream": "maybe"}, "stream"),
    ],
)
def test_a_bad_form_is_a_400_naming_the_field(
    stack: ProxyStack, files: dict[str, object], data: dict[str, str], param: str
) -> None:
    """No file part, an empty file, no model, a stream that is not true or false: 400 naming
    the field, before the engine."""
    stack.engine.forms.clear()
    answer = httpx.post(stack.base_url + URL, files=files, data=data)  # type: ignore[arg-type]
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param and stack.engine.forms == []


def test_bodies_that_are_not_a_form_are_refused(stack: ProxyStack) -> None:
    """JSON to an audio path is a 415; a multipart type with no boundary or a body cut before
    its closing boundary is a 400; a body over server.max_body_bytes is a 413."""
    url = stack.base_url + URL
    assert httpx.post(url, json={"model": "tiny"}).status_code == 415
    bare = httpx.post(url, content=b"--x\r\n", headers={"content-type": "multipart/form-data"})
    assert bare.status_code == 400 and "boundary" in bare.json()["error"]["message"]
    cut = httpx.post(
        url,
        content=b'--x\r\ncontent-disposition: form-data; name="model"\r\n\r\ntiny\r\n',
        headers={"content-type": "multipart/form-data; boundary=x"},
    )
    assert cut.status_code == 400
    big = httpx.post(url, files={"file": ("a.wav", bytes(2 * 1024 * 1024))}, data={"model": "tiny"})
    assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
    assert stack.engine.forms == []
