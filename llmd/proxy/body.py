"""Read a request body once, within the size limit, and parse it as a JSON object.

The public API and the admin API read their bodies here alike (`server.max_body_bytes`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Receive

from llmd.errors import BodyTooLarge, InvalidRequest


class ClientGone(Exception):
    """The client disconnected before its body was read."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body from ASGI `receive`. Raises BodyTooLarge past `limit` bytes, ClientGone."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes", param=None)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_object(body: bytes) -> dict[str, Any]:
    """Parse `body` as a JSON object. Raises InvalidRequest for bad JSON or a non-object."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {type(payload).__name__}")
    return payload
