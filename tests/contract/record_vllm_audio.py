"""Record tests/data/vllm_audio_http/: how vLLM's own HTTP layer answers audio requests.

The tiny model is no speech model, so no real engine answers /v1/audio/*. This runs vLLM's
real transcription and translation routers, request models (the multipart form, its
validators) and exception handlers in a FastAPI app whose serving objects are stubs that
answer every request that gets through with a fixed TranscriptionResponse/TranslationResponse.
The fixtures so pin parsing, validation and error shapes (the serving's own checks are read
from its source: llmd/engine/sim/audio_form.py). Same record format as
tests/data/vllm_cpu_endpoints (request, status, headers, body).

  .venv/bin/python tests/contract/record_vllm_audio.py    # about 20 s, imports vLLM
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import wave
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "vllm_audio_http"
LIMIT_MB = 1  # VLLM_MAX_AUDIO_CLIP_FILESIZE_MB while recording, so the limit case stays small


def tiny_wav(seconds: float = 1.0, rate: int = 16_000) -> bytes:
    """A mono 16-bit PCM WAV of silence."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()


WAV = ("hello.wav", tiny_wav(), "audio/wav")
BIG = ("big.wav", b"\0" * (LIMIT_MB * 1024 * 1024 + 1), "audio/wav")
T = "/v1/audio/transcriptions"
# name, path, form fields, files, raw (content type, body) instead of a form
CASES: list[tuple[str, str, dict[str, str], dict[str, Any], tuple[str, bytes] | None]] = [
    ("ok", T, {"model": "tiny"}, {"file": WAV}, None),
    ("translation_ok", "/v1/audio/translations", {"model": "tiny"}, {"file": WAV}, None),
    ("no_file", T, {"model": "tiny"}, {}, None),
    ("translation_no_file", "/v1/audio/translations", {"model": "tiny"}, {}, None),
    ("no_file_extra_field", T, {"model": "tiny", "sim_fault": "delay:0"}, {}, None),
    ("no_file_many_fields", T, {"model": "tiny", "language": "en", "stream": "true",
                                "temperature": "0.5"}, {}, None),
    ("file_as_text", T, {"model": "tiny", "file": "abc"}, {}, None),
    ("no_boundary", T, {}, {}, ("multipart/form-data", b"--x\r\n\r\n")),
    ("bad_multipart", T, {}, {}, ("multipart/form-data; boundary=xyz", b"garbage")),
    ("json_body", T, {}, {}, ("application/json", b'{"model": "tiny"}')),
    ("usage_without_stream", T, {"stream_include_usage": "true"}, {"file": WAV}, None),
    ("usage_false_without_stream", T, {"stream_include_usage": "false"}, {"file": WAV}, None),
    ("stream_false_with_usage", T, {"stream": "false", "stream_include_usage": "true"},
     {"file": WAV}, None),
    ("bad_response_format", T, {"response_format": "xml"}, {"file": WAV}, None),
    ("translation_bad_response_format", "/v1/audio/translations",
     {"response_format": "diarized_json"}, {"file": WAV}, None),
    ("bad_temperature", T, {"temperature": "warm"}, {"file": WAV}, None),
    ("bad_stream", T, {"stream": "maybe"}, {"file": WAV}, None),
    ("too_big", T, {"model": "tiny"}, {"file": BIG}, None),
]  # fmt: skip


def build_app() -> Any:
    """vLLM 0.32's audio routes and exception handlers over stub serving objects."""
    from argparse import Namespace

    from fastapi import FastAPI
    from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
    from vllm.entrypoints.speech_to_text.transcription.api_router import router as transcribe
    from vllm.entrypoints.speech_to_text.transcription.protocol import TranscriptionResponse
    from vllm.entrypoints.speech_to_text.translation.api_router import router as translate
    from vllm.entrypoints.speech_to_text.translation.protocol import TranslationResponse

    class Stub:
        async def create_transcription(self, audio: bytes, request: Any, raw: Any) -> Any:
            return TranscriptionResponse(text="stub", usage={"type": "duration", "seconds": 1})

        async def create_translation(self, audio: bytes, request: Any, raw: Any) -> Any:
            return TranslationResponse(text="stub")

    app = FastAPI()
    app.include_router(transcribe)
    app.include_router(translate)
    init_exception_handler(app)
    app.state.args = Namespace(log_error_stack=False)
    app.state.openai_serving_transcription = Stub()
    app.state.openai_serving_translation = Stub()
    app.state.enable_server_load_tracking = False
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    os.environ["VLLM_MAX_AUDIO_CLIP_FILESIZE_MB"] = str(LIMIT_MB)
    from fastapi.testclient import TestClient
    from vllm import __version__

    client = TestClient(build_app())
    args.out.mkdir(parents=True, exist_ok=True)
    for name, path, form, files, raw in CASES:
        request: dict[str, Any] = {"method": "POST", "path": path}
        if raw is not None:
            response = client.post(path, content=raw[1], headers={"content-type": raw[0]})
            request["raw"] = {"content_type": raw[0], "body": raw[1].decode()}
        else:
            response = client.post(path, data=form, files=files or None)
            request["multipart"] = {
                "fields": form,
                "files": {
                    part: {"filename": f[0], "content_type": f[2], "bytes": len(f[1])}
                    for part, f in files.items()
                },
            }
        record = {
            "engine": "vllm HTTP layer, stub serving",
            "vllm": __version__,
            "env": {"VLLM_MAX_AUDIO_CLIP_FILESIZE_MB": str(LIMIT_MB)},
            "case": name,
            "request": request,
            "status": response.status_code,
            "body": response.json(),
        }
        (args.out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"{name}: {response.status_code}", file=sys.stderr)


if __name__ == "__main__":
    main()
