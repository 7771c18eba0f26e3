"""Audio uploads for the transcription and translation tests and recorders."""

from __future__ import annotations

import io
import wave


def silence_wav(seconds: float = 1.0, rate: int = 16_000) -> bytes:
    """A mono 16-bit PCM WAV file of silence: `seconds` long at `rate` Hz."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()
