"""The multipart form of an audio request, read and checked as vLLM 0.32 (FastAPI over
Starlette's form parser) does, in its order.

1. The body: `multipart/form-data` without a boundary is 400 "Missing boundary in multipart.",
   a body that does not parse 400 "Invalid multipart data."; another content type is an empty
   form. 2. The model's `before` validator (speech_to_text/*/protocol.py): a `file` part with
   no filename is 422 "Expected 'file' to be a file-like object, not 'str'."; a stream option
   without `stream` a 400 (vLLM tests the raw form strings: "false" counts as set). 3. The
   fields' types (400, pydantic's message; a missing `file` is "Field required"). 4. An upload
   over VLLM_MAX_AUDIO_CLIP_FILESIZE_MB (25) is 400. 5. The serving checks (`check_for`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException

from llmd.engine.sim.asgi import SimRequest
from llmd.engine.sim.errors import (
    DetailError,
    SimHTTPError,
    bad_request,
    invalid_value,
    validation_error,
)

MIB = 1024 * 1024
FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
SERVED_FORMATS = ("text", "json", "verbose_json", "diarized_json")
# Whisper's natively supported languages (vllm/model_executor/models/whisper_utils.py), then
# the others of Whisper's tokenizer (transformers' LANGUAGES), which vLLM takes with a warning.
LANGUAGES = (
    "af", "ar", "hy", "az", "be", "bs", "bg", "ca", "zh", "hr", "cs", "da", "nl", "en", "et",
    "fi", "fr", "gl", "de", "el", "he", "hi", "hu", "is", "id", "it", "ja", "kn", "kk", "ko",
    "lv", "lt", "mk", "ms", "mr", "mi", "ne", "no", "fa", "pl", "pt", "ro", "ru", "sr", "sk",
    "sl", "es", "sw", "sv", "tl", "ta", "th", "tr", "uk", "ur", "vi", "cy",
)  # fmt: skip
OTHER_LANGUAGES = frozenset({
    "la", "ml", "te", "bn", "br", "eu", "mn", "sq", "pa", "si", "km", "sn", "yo", "so", "oc",
    "ka", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa",
    "lb", "my", "bo", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
})  # fmt: skip
# The form fields whose defaults are not None: FastAPI hands pydantic these beside the fields
# sent, so a missing `file` reports a dict of their union (seen: 13 fields for a bare
# transcription, 12 for a translation).
_DEFAULTED = (
    "prompt", "response_format", "stream", "stream_include_usage",
    "stream_continuous_usage_stats", "use_beam_search", "n", "length_penalty",
    "include_stop_str_in_output", "temperature", "frequency_penalty", "presence_penalty",
)  # fmt: skip
_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")


@dataclasses.dataclass(frozen=True)
class AudioRequest:
    """A checked transcription or translation request."""

    task: str
    audio: bytes
    model: str | None = None
    language: str | None = None
    prompt: str = ""
    response_format: str = "json"
    temperature: float = 0.0
    stream: bool = False
    stream_include_usage: bool = False
    stream_continuous_usage_stats: bool = False
    use_beam_search: bool = False
    max_completion_tokens: int | None = None
    sim_fault: str = ""

    def check_for(self, model: str) -> None:
        """The serving's own checks (base/serving.py `_create_speech_to_text`,
        `_preprocess_speech_to_text`) of a Whisper-like model named `model`. Raises
        `SimHTTPError` 400."""
        if self.stream and self.use_beam_search:
            raise bad_request("Streaming is not currently supported with beam search")
        if self.response_format not in SERVED_FORMATS:
            raise bad_request(
                "Currently only support response_format: `text`, `json`, `verbose_json` or "
                "`diarized_json`"
            )
        if self.response_format == "diarized_json":
            raise bad_request(f"Currently do not support diarized_json for {model}")
        if self.response_format == "verbose_json" and self.stream:
            raise bad_request("verbose_json format doesn't support streaming case")
        language = self.language
        if language is not None and language not in LANGUAGES and language not in OTHER_LANGUAGES:
            raise bad_request(
                f"Unsupported language: {language!r}.  Must be one of {list(LANGUAGES)}."
            )


async def read_form(request: SimRequest, task: str) -> AudioRequest:
    """The request's form as an `AudioRequest`. Raises `SimHTTPError`."""
    form = await _form(request)
    try:
        return _audio_request({name: form.getlist(name)[-1] for name in form}, task)
    finally:
        await form.close()


def _audio_request(fields: dict[str, Any], task: str) -> AudioRequest:
    if isinstance(fields.get("file"), str):
        raise SimHTTPError(
            422,
            "Expected 'file' to be a file-like object, not 'str'.",
            type="Unprocessable Entity",
        )
    options = ("stream_include_usage", "stream_continuous_usage_stats")
    if any(fields.get(o) for o in options) and not fields.get("stream"):
        raise invalid_value(
            "Stream options can only be defined when `stream=True`.",
            next(o for o in options if fields.get(o)),
        )
    upload = fields.get("file")
    if upload is None:
        defaulted = (
            {*_DEFAULTED, "timestamp_granularities"} if task == "transcribe" else {*_DEFAULTED}
        )
        seen = dict.fromkeys(defaulted | fields.keys())
        raise validation_error("missing", "body.file", "Field required", seen)
    response_format = fields.get("response_format", "json")
    if response_format not in FORMATS and not (
        task == "transcribe" and response_format == "diarized_json"
    ):
        raise _format_error(task, response_format)
    audio = upload.file.read()
    limit = int(os.environ.get("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "25")) * MIB
    if len(audio) > limit:
        raise invalid_value("Maximum file size exceeded", "audio_filesize_mb", len(audio) / MIB)
    fault = fields.get("sim_fault")
    return AudioRequest(
        task=task,
        audio=audio,
        model=fields.get("model") or None,
        language=fields.get("language") or None,
        prompt=fields.get("prompt", ""),
        response_format=response_format,
        temperature=_number(fields, "temperature", 0.0),
        stream=_flag(fields, "stream"),
        stream_include_usage=_flag(fields, "stream_include_usage"),
        stream_continuous_usage_stats=_flag(fields, "stream_continuous_usage_stats"),
        use_beam_search=_flag(fields, "use_beam_search"),
        max_completion_tokens=_integer(fields, "max_completion_tokens"),
        sim_fault=fault if isinstance(fault, str) else "",
    )


def _format_error(task: str, value: str) -> SimHTTPError:
    """Pydantic's literal errors for `response_format`: one per literal of its union (the
    transcription's adds `diarized_json`)."""
    quoted = ", ".join(f"'{f}'" for f in FORMATS[:-1]) + f" or '{FORMATS[-1]}'"
    error = validation_error(
        "literal_error",
        "body.response_format",
        f"Input should be {quoted}",
        value,
        {"expected": quoted},
    )
    if task == "transcribe":
        second = validation_error(
            "literal_error",
            "body.response_format",
            "Input should be 'diarized_json'",
            value,
            {"expected": "'diarized_json'"},
        )
        detail = second.message.partition("\n")[2]
        error.message = "2 validation errors:\n" + error.message.partition("\n")[2] + "\n" + detail
    return error


async def _form(request: SimRequest) -> FormData:
    """The form, as Starlette parses it (empty unless the body is a form)."""
    if request.mime_type not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        return FormData()
    if request.mime_type == "multipart/form-data" and "boundary" not in request.headers.get(
        "content-type", ""
    ):
        raise DetailError(400, "Missing boundary in multipart.")
    try:
        return await request.form()
    except (ValueError, MultiPartException) as exc:
        raise DetailError(400, "Invalid multipart data.") from exc


def _flag(fields: dict[str, Any], name: str) -> bool:
    value = fields.get(name)
    if value is None:
        return False
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise validation_error(
        "bool_parsing",
        f"body.{name}",
        "Input should be a valid boolean, unable to interpret input",
        value,
    )


def _number(fields: dict[str, Any], name: str, default: float) -> float:
    value = fields.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise validation_error(
            "float_parsing",
            f"body.{name}",
            "Input should be a valid number, unable to parse string as a number",
            value,
        ) from None


def _integer(fields: dict[str, Any], name: str) -> int | None:
    value = fields.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise validation_error(
            "int_parsing",
            f"body.{name}",
            "Input should be a valid integer, unable to parse string as an integer",
            value,
        ) from None
