"""Audio endpoints (`/v1/audio/transcriptions`, `/v1/audio/translations`): a multipart form
read once from the body's bytes (python-multipart's streaming parser; the file's bytes are
never copied, only measured), the model taken from its `model` field, and its cost bounded by
the audio's length.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from llmd.errors import InvalidRequest
from llmd.validation.fields import NO_OUTPUT, Fields, TextPrompt

if TYPE_CHECKING:  # a TypedDict the library defines only for type checkers
    from python_multipart.multipart import MultipartCallbacks

# Form fields kept as text (everything else a client sends is passed on, unread): OpenAI's
# and vLLM 0.32's transcription request (entrypoints/speech_to_text/protocol.py).
FIELD_LIMIT = 64 * 1024  # bytes of one text field llmd keeps; the file is only measured
FILE_FIELD = "file"
# The fewest bytes one second of a compressed upload takes (16 kbit/s: speech in Opus or
# low-rate MP3), so `size / AUDIO_BYTES_PER_S` bounds its seconds from above.
AUDIO_BYTES_PER_S = 2_000
# Whisper-style models transcribe in windows of 30 s (vLLM 0.32 splits longer audio into such
# chunks, speech_to_text `max_audio_clip_s`), each a sequence of at most their context.
WINDOW_S = 30


@dataclasses.dataclass(frozen=True)
class Upload:
    """A form's file part: its field `name`, `filename`, content type and size in bytes."""

    name: str
    filename: str | None
    content_type: str | None
    size: int


def read_form(raw: bytes, content_type: bytes) -> dict[str, Any]:
    """The text fields of a multipart form in `raw` (with `Content-Type` value
    `content_type`), by name (the last one of a name wins, as vLLM's form reading keeps),
    and its file parts as `Upload`s under `_files`. Raises InvalidRequest (400) for a type
    that is not multipart/form-data or has no boundary, a body that does not parse, a text
    field over FIELD_LIMIT."""
    media, options = parse_options_header(content_type)
    if media != b"multipart/form-data":
        raise InvalidRequest(
            "this endpoint takes multipart/form-data (a file and form fields)",
            param="content-type",
        )
    boundary = options.get(b"boundary")
    if not boundary:
        raise InvalidRequest(
            "Content-Type multipart/form-data has no boundary", param="content-type"
        )
    form = _Form()
    try:
        parser = MultipartParser(boundary, form.callbacks())
        parser.write(raw)
        parser.finalize()
    except (MultipartParseError, ValueError) as exc:
        raise InvalidRequest(f"the multipart body does not parse: {exc}", param=None) from None
    if not form.ended:
        raise InvalidRequest("the multipart body ends before its closing boundary", param=None)
    return {**form.fields, "_files": form.files}


def read_transcription(form: dict[str, Any]) -> Fields:
    """A transcription or translation form: its `file` (required), `model` (required, as in
    OpenAI's API), `stream` ("true" or "false"); the rest passes to the engine. The prompt is
    the upload, which llmd does not count (`local` False: the engine checks it). Raises
    InvalidRequest (400)."""
    files: list[Upload] = form.get("_files", [])
    upload = next((f for f in files if f.name == FILE_FIELD), None)
    if upload is None:
        raise InvalidRequest("the form has no 'file' part (the audio)", param=FILE_FIELD)
    if upload.size == 0:
        raise InvalidRequest("the 'file' part is empty", param=FILE_FIELD)
    model = form.get("model")
    if not model:
        raise InvalidRequest("'model' is required (a form field)", param="model")
    stream = form.get("stream", "false").strip().lower()
    if stream not in ("true", "false"):
        raise InvalidRequest("'stream' must be true or false", param="stream")
    return Fields(
        model=model,
        prompt=TextPrompt([], add_special_tokens=False, param=FILE_FIELD, local=False),
        output=NO_OUTPUT,
        stream=stream == "true",
        audio_bytes=upload.size,
    )


def audio_windows(audio_bytes: int) -> int:
    """How many 30 s windows an upload of `audio_bytes` can hold at most (at least one)."""
    return max(1, math.ceil(audio_bytes / AUDIO_BYTES_PER_S / WINDOW_S))


class _Form:
    """What the parser's callbacks gather: text fields by name, file parts measured."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}
        self.files: list[Upload] = []
        self.ended = False
        self._header = b""
        self._value = b""
        self._headers: dict[bytes, bytes] = {}
        self._data: list[bytes] = []
        self._size = 0
        self._name = ""
        self._filename: str | None = None

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._begin,
            "on_header_field": lambda data, start, end: self._add("_header", data[start:end]),
            "on_header_value": lambda data, start, end: self._add("_value", data[start:end]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _add(self, attribute: str, data: bytes) -> None:
        setattr(self, attribute, getattr(self, attribute) + data)

    def _begin(self) -> None:
        self._headers, self._data, self._size = {}, [], 0
        self._name, self._filename = "", None

    def _header_end(self) -> None:
        self._headers[self._header.strip().lower()] = self._value.strip()
        self._header = self._value = b""

    def _headers_finished(self) -> None:
        """The part's name and filename, from its Content-Disposition (RFC 7578 §4.2)."""
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        self._filename = filename.decode("utf-8", "replace") if filename is not None else None

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self._size += end - start
        if self._filename is None:
            if self._size > FIELD_LIMIT:
                raise InvalidRequest(f"a form field is over {FIELD_LIMIT} bytes", param=self._name)
            self._data.append(data[start:end])

    def _part_end(self) -> None:
        if self._filename is not None:
            kind = self._headers.get(b"content-type")
            media = kind.decode("latin-1") if kind else None
            self.files.append(Upload(self._name, self._filename, media, self._size))
        else:
            self.fields[self._name] = b"".join(self._data).decode("utf-8", "replace")

    def _end(self) -> None:
        self.ended = True
