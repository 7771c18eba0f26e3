"""/v1/audio/transcriptions and /v1/audio/translations of a speech model (`--sim-asr`), as
vLLM 0.32 serves a Whisper model (entrypoints/speech_to_text/: protocol.py, api_router.py,
base/serving.py), with a fake recogniser: the text is made up, its length from the audio's.

Duration: a WAV's own (frames / rate); any other upload is taken as compressed audio of 16,000
bytes per second (128 kbit/s); an empty or unreadable WAV is "Invalid or unsupported audio
file." (400). The text has 2.5 words per second (at least one), drawn from a fixed word list
seeded by the upload's bytes, cut to `max_completion_tokens`. It runs on the engine as a
generation request of those tokens; the prompt is Whisper's (4 decoder tokens, the `prompt`'s
behind a `<|prev|>` token) and in stream usage the audio's mel frames too (100 per second,
whisper.py `get_num_audio_tokens`).
"""

from __future__ import annotations

import hashlib
import io
import math
import random
import time
import wave
from typing import TYPE_CHECKING, Any

from llmd.engine.sim.asgi import Answer, EventStream, Routes, SimRequest
from llmd.engine.sim.audio_form import AudioRequest, read_form
from llmd.engine.sim.errors import SimHTTPError, bad_request
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.front import Front
from llmd.engine.sim.pooled import request_id_of
from llmd.engine.sim.requests import GenerationRequest
from llmd.engine.sim.responses import DONE, drop_connection, dumps, json_response, sse

if TYPE_CHECKING:
    from llmd.engine.sim.core import RequestState

COMPRESSED_BYTES_PER_S = 16_000
WORDS_PER_S = 2.5
MEL_FRAMES_PER_S = 100  # Whisper: 16 kHz sampling, hop length 160
WORDS = (
    "the", "a", "of", "and", "to", "in", "is", "that", "it", "was", "for", "on", "are", "with",
    "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "word",
    "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up",
    "use", "your", "how", "said", "an", "each", "she", "which", "do", "their", "time", "if",
    "will", "way", "about", "many", "then", "them", "write", "would", "like", "so", "these",
    "her", "long", "make", "thing", "see", "him", "two", "has", "look", "more", "day", "could",
    "go", "come", "did", "number", "sound",
)  # fmt: skip


class AudioRoutes:
    """The speech-to-text routes (registered only for a model with the transcription task)."""

    def __init__(self, server: Front) -> None:
        self.server = server

    def add_to(self, router: Routes) -> None:
        router.add_post("/v1/audio/transcriptions", self.transcriptions)
        router.add_post("/v1/audio/translations", self.translations)

    async def transcriptions(self, request: SimRequest) -> Answer:
        """`{"text", "usage": {"type": "duration", "seconds"}}` (seconds rounded up), the
        verbose form, or `transcription.chunk` events with `stream=true`."""
        return await self._serve(request, "transcribe")

    async def translations(self, request: SimRequest) -> Answer:
        """`{"text"}` (no usage, as vLLM), the verbose form, or `translation.chunk` events."""
        return await self._serve(request, "translate")

    async def _serve(self, request: SimRequest, task: str) -> Answer:
        server = self.server
        try:
            form = await read_form(request, task)
            server.check_model(form.model)
            form.check_for(form.model or server.model_name)
            duration = audio_duration(form.audio)
        except SimHTTPError as error:
            return error.response()
        fault = await server.admit(request, form.sim_fault)
        if not isinstance(fault, RequestFault):
            return fault
        text_ids = self._text_ids(form, duration)
        prompt_ids = [1] * 4 + (
            [1, *server.tokenizer.encode(form.prompt, add_special_tokens=False)]
            if form.prompt
            else []
        )
        engine_request = GenerationRequest(
            kind="completion",
            model=None,
            prompt_ids=tuple(prompt_ids),
            max_tokens=len(text_ids),
            stream=form.stream,
        )
        request_id = f"{task}-{request_id_of(request, {})}"
        try:
            state = server.engine.submit(engine_request, fault, request_id)
        except SimHTTPError as error:
            return error.response()
        try:
            if form.stream:
                prompt_tokens = len(prompt_ids) + math.ceil(duration * MEL_FRAMES_PER_S)
                stream = Stream(
                    form, task, request_id, form.model or server.model_name, prompt_tokens
                )
                return await stream.send(request, state, text_ids, server.tokenizer.piece)
            try:
                async for _ in state.updates():
                    pass
            except SimHTTPError as error:
                return error.response()
            if fault.die_after is not None:
                return drop_connection(request)
            text = server.tokenizer.decode(text_ids[: len(state.token_ids)])
            return json_response(dumps(_answer(form, task, text, duration, text_ids)))
        finally:
            server.engine.abort(state)

    def _text_ids(self, form: AudioRequest, duration: float) -> list[int]:
        rng = random.Random(hashlib.blake2b(form.audio, digest_size=8).digest())
        words = [rng.choice(WORDS) for _ in range(max(1, round(duration * WORDS_PER_S)))]
        text = " ".join(words).capitalize() + "."
        ids = self.server.tokenizer.encode(" " + text, add_special_tokens=False)
        limit = form.max_completion_tokens or self.server.max_model_len - 4
        return ids[: max(1, limit)]


class Stream:
    """The SSE answer of one streamed request (base/serving.py
    `_speech_to_text_stream_generator`): a chunk per token, the finish reason on the last, a
    usage chunk with `stream_include_usage`, then `data: [DONE]`."""

    def __init__(
        self, form: AudioRequest, task: str, request_id: str, model: str, prompt_tokens: int
    ) -> None:
        self.form = form
        self.head = {
            "id": request_id,
            "object": "transcription.chunk" if task == "transcribe" else "translation.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self.prompt_tokens = prompt_tokens

    async def send(
        self, request: SimRequest, state: RequestState, text_ids: list[int], piece: Any
    ) -> Answer:
        response = EventStream(request)
        await response.start()
        sent = 0
        try:
            async for start, end in state.updates():
                for index in range(start, end):
                    sent += 1
                    done = state.finish_reason is not None and index == end - 1
                    await response.write(self._chunk(piece(text_ids[index]), sent, done))
        except SimHTTPError as error:
            await response.write(b"data: " + error.json_bytes() + b"\n\n")
        else:
            if self.form.stream_include_usage:
                usage = self._usage(sent)
                await response.write(sse({**self.head, "choices": [], "usage": usage}))
        await response.write(DONE)
        await response.end()
        return response

    def _chunk(self, text: str, sent: int, done: bool) -> bytes:
        choice: dict[str, Any] = {"delta": {"content": text}}
        if done:
            choice |= {"finish_reason": "stop", "stop_reason": None}
        chunk: dict[str, Any] = {**self.head, "choices": [choice]}
        if self.form.stream_include_usage and self.form.stream_continuous_usage_stats:
            chunk["usage"] = self._usage(sent)
        return sse(chunk)

    def _usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }


def audio_duration(audio: bytes) -> float:
    """Seconds of audio in an upload: a WAV's header, else its size at 128 kbit/s. Raises
    `SimHTTPError` 400 for an empty upload or a WAV that does not parse."""
    if audio.startswith(b"RIFF"):
        try:
            with wave.open(io.BytesIO(audio)) as clip:
                return float(clip.getnframes() / clip.getframerate())
        except (wave.Error, EOFError, ZeroDivisionError) as exc:
            raise bad_request("Invalid or unsupported audio file.") from exc
    if not audio:
        raise bad_request("Invalid or unsupported audio file.")
    return len(audio) / COMPRESSED_BYTES_PER_S


def _answer(
    form: AudioRequest, task: str, text: str, duration: float, ids: list[int]
) -> dict[str, Any]:
    """The JSON answer: `text` (vLLM answers `response_format: text` in JSON too), usage for
    a transcription, or the verbose form with one segment spanning the audio."""
    if form.response_format != "verbose_json":
        if task == "translate":
            return {"text": text}
        return {"text": text, "usage": {"type": "duration", "seconds": math.ceil(duration)}}
    segment = {
        "id": 0,
        "avg_logprob": -0.25,
        "compression_ratio": 1.5,
        "end": duration,
        "no_speech_prob": None,
        "seek": 0,
        "start": 0.0,
        "temperature": form.temperature,
        "text": text,
        "tokens": ids,
    }
    return {
        "duration": duration,
        "language": form.language or "en",
        "text": text,
        "segments": [segment],
        "words": None,
    }
