"""The speech simulator (`--sim-asr`): transcriptions and translations from multipart uploads,
usage, streaming, its refusals; a model without it answers FastAPI's 404."""

from __future__ import annotations

import json

import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory
from tests.support.audio import silence_wav

T = "/v1/audio/transcriptions"


def wav(seconds: float) -> tuple[str, bytes, str]:
    """A silent mono 16 kHz WAV upload of `seconds`."""
    return ("clip.wav", silence_wav(seconds), "audio/wav")


@pytest.fixture
async def asr(make_sim: SimFactory) -> RunningSim:
    """A simulated speech model."""
    running: RunningSim = await make_sim("--sim-asr")
    return running


async def test_transcription_text_grows_with_the_audio(asr: RunningSim) -> None:
    """The text is longer for longer audio, the same for the same upload; usage is the
    duration in whole seconds, rounded up."""
    short = (await asr.client.post(T, data={"model": "tiny"}, files={"file": wav(1)})).json()
    again = (await asr.client.post(T, files={"file": wav(1)})).json()
    long = (await asr.client.post(T, files={"file": wav(8.5)})).json()
    assert list(short) == ["text", "usage"] and short == again
    assert short["usage"] == {"type": "duration", "seconds": 1}
    assert long["usage"] == {"type": "duration", "seconds": 9}
    assert len(long["text"].split()) > 4 * len(short["text"].split())


async def test_any_other_upload_is_taken_as_compressed_audio(asr: RunningSim) -> None:
    """A non-WAV upload lasts its size at 16,000 bytes per second; an empty one is refused."""
    mp3 = ("clip.mp3", b"\xff\xfb" * 24_000, "audio/mpeg")
    answer = (await asr.client.post(T, files={"file": mp3})).json()
    empty = await asr.client.post(T, files={"file": ("clip.wav", b"", "audio/wav")})
    assert answer["usage"]["seconds"] == 3
    assert empty.status_code == 400
    assert empty.json()["error"]["message"] == "Invalid or unsupported audio file."


async def test_translation_has_no_usage(asr: RunningSim) -> None:
    """vLLM answers a translation with its text only."""
    answer = (await asr.client.post("/v1/audio/translations", files={"file": wav(1)})).json()
    assert list(answer) == ["text"]


async def test_verbose_json(asr: RunningSim) -> None:
    """verbose_json: duration, language, text and Whisper-shaped segments."""
    data = {"response_format": "verbose_json", "language": "fr"}
    answer = (await asr.client.post(T, data=data, files={"file": wav(2)})).json()
    assert list(answer) == ["duration", "language", "text", "segments", "words"]
    assert answer["duration"] == 2.0 and answer["language"] == "fr"
    assert answer["segments"][0]["text"] == answer["text"]


async def test_stream(asr: RunningSim) -> None:
    """stream=true: transcription.chunk events, the finish reason on the last text chunk, a
    usage chunk with stream_include_usage (audio frames in the prompt), then [DONE]."""
    data = {"stream": "true", "stream_include_usage": "true"}
    response = await asr.client.post(T, data=data, files={"file": wav(1)})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e.removeprefix("data: ") for e in response.text.strip().split("\n\n")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "transcription.chunk" for c in chunks)
    assert all(c["id"].startswith("transcribe-") for c in chunks)
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert "finish_reason" not in chunks[0]["choices"][0]
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == len(chunks) - 1
    assert usage["prompt_tokens"] == 4 + 100 and text
    whole = (await asr.client.post(T, files={"file": wav(1)})).json()
    assert text == whole["text"]


@pytest.mark.parametrize(
    ("kwargs", "status", "body_part"),
    [
        ({"data": {"model": "tiny"}}, 400, "'loc': 'body.file', 'msg': 'Field required'"),
        ({"data": {"file": "abc"}}, 422, "Expected 'file' to be a file-like object"),
        (
            {"files": {"file": wav(1)}, "data": {"stream_include_usage": "false"}},
            400,
            "stream=True",
        ),
        ({"files": {"file": wav(1)}, "data": {"response_format": "srt"}}, 400, "Currently only"),
        ({"files": {"file": wav(1)}, "data": {"language": "xx"}}, 400, "Unsupported language"),
        ({"files": {"file": wav(1)}, "data": {"model": "nope"}}, 404, "does not exist"),
        (
            {"files": {"file": wav(1)}, "data": {"response_format": "verbose_json", "stream": "1"}},
            400,
            "doesn't support streaming",
        ),
        (
            {"content": b"--x\r\n", "headers": {"content-type": "multipart/form-data"}},
            400,
            '{"detail": "Missing boundary in multipart."}',
        ),
    ],
)
async def test_refusals(
    asr: RunningSim, kwargs: dict[str, object], status: int, body_part: str
) -> None:
    """Bad forms and options are refused as vLLM 0.32 refuses them."""
    response = await asr.client.post(T, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status and body_part in response.text


async def test_speech_requests_are_generation(asr: RunningSim) -> None:
    """A transcription runs on the engine: its text's tokens count as generation tokens."""
    await asr.client.post(T, data={"stream": "true"}, files={"file": wav(1)})
    text = (await asr.client.get("/metrics")).text
    line = next(x for x in text.splitlines() if x.startswith("vllm:generation_tokens_total"))
    assert float(line.split()[-1]) > 0


async def test_faults_apply_to_audio(asr: RunningSim) -> None:
    """x-sim-fault and the `sim_fault` form field work on the audio paths."""
    header = await asr.client.post(T, files={"file": wav(1)}, headers={"x-sim-fault": "error:503"})
    field = await asr.client.post(T, files={"file": wav(1)}, data={"sim_fault": "error:500"})
    assert header.status_code == 503 and field.status_code == 500


async def test_no_audio_without_the_option(sim: RunningSim) -> None:
    """A model without the transcription task: FastAPI's 404, as vLLM registers no route."""
    for path in (T, "/v1/audio/translations"):
        response = await sim.client.post(path, files={"file": wav(1)})
        assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
