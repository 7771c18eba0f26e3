"""Read a request body once, within the size limit, and parse it as a JSON object.

The public API and the admin API read their bodies here alike (`server.max_body_bytes`). A body
sent with `Content-Encoding: gzip` or `deflate` is decoded as it arrives, the decoded size held
to the same limit (a small bomb never grows past it). The JSON layer refuses what would make a
later stage raise: text that is not UTF-8, `NaN`/`Infinity`, duplicate keys, nesting past
`MAX_DEPTH`, and strings holding lone UTF-16 surrogates (valid JSON escapes that no UTF-8 encoder,
tokenizer included, accepts). Each refusal is a 400 naming the field.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import zlib
from collections.abc import Callable
from typing import Any

from starlette.types import Receive

from llmd.errors import BodyTooLarge, InvalidRequest, RequestTimeout, UnsupportedMediaType
from llmd.numerals import ascii_int
from llmd.quoting import header_text, json_type

# Deepest nesting of arrays and objects accepted. Far above what the OpenAI API needs (a JSON
# schema for structured output nests a few dozen levels at most) and far below the recursion
# limits of the JSON encoder, the template engine and vLLM's own parser.
MAX_DEPTH = 64
# Content codings llmd decodes (RFC 9110 §8.4.1; "x-gzip" is gzip, §8.4.1.3), as zlib `wbits`.
CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_UTF8_BOM = b"\xef\xbb\xbf"
# A JSON escape of a UTF-16 surrogate: the only way a lone one gets into text decoded as UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class ClientGone(Exception):
    """The client disconnected before its body was read."""


def check_content_type(headers: list[Any], *, multipart: bool = False) -> bytes:
    """Require `Content-Type: application/json` (any parameters, such as a charset: RFC 8259
    §11 defines none, and the body is read as UTF-8 whatever they say), as vLLM 0.32 does;
    `multipart/form-data` instead for an endpoint that takes a form (audio). A web page can
    send a cross-origin POST without a CORS preflight only with a form or text type, so
    refusing those keeps pages from calling the JSON API behind the user's back (a form
    endpoint takes a key as every /v1 path does). The header's value. Raises
    UnsupportedMediaType (415)."""
    value = next((v for k, v in headers if k == b"content-type"), None)
    media_type = value.split(b";")[0].strip().lower() if value is not None else b""
    wanted, what = (
        (b"multipart/form-data", "a form") if multipart else (b"application/json", "JSON")
    )
    if media_type != wanted:
        given = f"Content-Type {header_text(value)}" if value is not None else "no Content-Type"
        raise UnsupportedMediaType(
            f"request body must be {what} sent as Content-Type: {wanted.decode()}; got {given}",
            param="content-type",
        )
    return value or b""


def body_coding(headers: list[Any]) -> str | None:
    """The content coding of a request with ASGI `headers`: None (identity), "gzip", "x-gzip"
    or "deflate". Raises UnsupportedMediaType (415) for any other coding, or more than one."""
    value = b",".join(v for k, v in headers if k == b"content-encoding")
    codings = [c.strip().lower() for c in value.decode("latin-1").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in CODINGS:
        raise UnsupportedMediaType(
            f"Content-Encoding {header_text(value)} is not supported: send the body "
            "as is, or with one of gzip, deflate",
            param="content-encoding",
            accept_encoding="gzip, deflate",
        )
    return codings[0]


def check_length(headers: list[Any], limit: int) -> None:
    """Refuse at once, before a byte of it is read, a body whose `Content-Length` (in ASGI
    `headers`) is over `limit`: it would be refused once that much arrived (as sent, whatever
    its coding). Raises BodyTooLarge (413)."""
    length = ascii_int(next((v for k, v in headers if k == b"content-length"), b""))
    if length is not None and length > limit:
        raise BodyTooLarge(
            f"request body of {length} bytes (Content-Length) is over the limit of {limit} bytes",
            param=None,
        )


async def read_body(
    receive: Receive,
    limit: int,
    coding: str | None = None,
    timeout_s: float = 0.0,
    taking: Callable[[int], None] | None = None,
    *,
    whole: bool = False,
) -> bytes:
    """The whole body from ASGI `receive`, decoded from `coding` (see `body_coding`), within
    `timeout_s` seconds (0: no limit). `taking`, when given, hears the bytes kept so far (as
    decoded) each time a chunk adds some, before the next is read; what it raises ends the read.
    `whole`: the body is all there already (its end parsed with its head), so `receive` answers
    at once and the read needs no timer (an `asyncio.timeout` is about 2 µs, issue 37 item 3).

    Raises BodyTooLarge past `limit` bytes, as sent or as decoded; InvalidRequest for a body
    that does not decode; RequestTimeout (408) for one that takes longer; ClientGone.
    """
    if whole or not timeout_s:
        return await _read(receive, limit, coding, taking)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(receive, limit, coding, taking)
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {timeout_s:g} s (server.read_timeout_s)"
        ) from None


async def _read(
    receive: Receive, limit: int, coding: str | None, taking: Callable[[int], None] | None
) -> bytes:
    decoder = zlib.decompressobj(CODINGS[coding]) if coding else None
    chunks: list[bytes] = []
    received = size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > limit:
            raise _too_large(limit, "")
        if decoder is not None and chunk:
            try:  # never more than one byte past the limit, however well the input compresses
                chunk = decoder.decompress(chunk, limit - size + 1)
            except zlib.error as exc:
                raise _undecodable(coding, exc) from exc
        size += len(chunk)
        if size > limit:
            raise _too_large(limit, " once decoded")
        if taking is not None and chunk:
            taking(size)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if decoder is not None and (not decoder.eof or decoder.unused_data):
        raise _undecodable(coding, "incomplete, or data after its end")
    return b"".join(chunks)


def parse_object(body: bytes) -> dict[str, Any]:
    """Parse `body` (UTF-8, a leading byte order mark ignored: RFC 8259 §8.1) as a JSON object.

    Raises InvalidRequest for text that is not UTF-8 or not JSON, a non-object, `NaN` or
    `Infinity` (and numbers too large for a double, or integers of more digits than Python
    reads), duplicate keys, nesting deeper than `MAX_DEPTH`, and lone surrogates in a string;
    the message names the field.
    """
    try:
        text = body.removeprefix(_UTF8_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"request body must be JSON in UTF-8 (RFC 8259): byte {exc.start} is not UTF-8"
        ) from exc
    try:
        payload = json.loads(
            text,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError as exc:
        raise InvalidRequest(f"request body nests deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidRequest(f"request body must be a JSON object, got {json_type(payload)}")
    _check_values(payload, text)
    return payload


def without_bom(body: bytes) -> bytes:
    """`body` without a leading UTF-8 byte order mark (what is relayed to the engine)."""
    return body.removeprefix(_UTF8_BOM)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259 §6)")


def _bounded_int(text: str) -> int:
    """An integer of the body. Raises InvalidRequest for more digits than Python reads
    (sys.get_int_max_str_digits, 4,300 by default), in words of the request, not of Python."""
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit:  # 0: no limit
        raise InvalidRequest(
            f"request body has a number of {len(text):,} digits ({text[:20]}...): "
            f"at most {limit:,} are read"
        )
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key[:40]!a} appears twice in one object")
            seen.add(key)
    return result


def _check_values(payload: dict[str, Any], text: str) -> None:
    """Depth and lone surrogates, walked without recursion. Raises InvalidRequest.

    The walk runs only when the text could fail it (more brackets than `MAX_DEPTH`, or a
    surrogate escape), so a long array of token ids is not walked in Python."""
    strings = _SURROGATE_ESCAPE.search(text) is not None
    if not strings and text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    stack: list[tuple[Any, str, int]] = [(payload, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            shown = path if len(path) <= 80 else path[:77] + "..."
            raise InvalidRequest(
                f"request body nests deeper than {MAX_DEPTH} levels at {shown}",
                param=_field(path),
            )
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else key
                if strings:
                    _check_text(key, where)
                if strings and isinstance(item, str):
                    _check_text(item, where)
                elif isinstance(item, dict | list):
                    stack.append((item, where, depth + 1))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if strings and isinstance(item, str):
                    _check_text(item, f"{path}[{index}]")
                elif isinstance(item, dict | list):
                    stack.append((item, f"{path}[{index}]", depth + 1))


def _check_text(text: str, where: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            f"{where} holds a lone UTF-16 surrogate ({text[exc.start]!a}) at character "
            f"{exc.start}: not a Unicode character; escape a character outside the Basic "
            "Multilingual Plane as a surrogate pair (\\ud83d\\ude00), or send it as UTF-8",
            param=_field(where),
        ) from None


def _field(path: str) -> str:
    """The top-level field of a JSON path such as `messages[0].content`."""
    return path.split(".")[0].split("[")[0]


def _too_large(limit: int, how: str) -> BodyTooLarge:
    return BodyTooLarge(f"request body is over the limit of {limit} bytes{how}", param=None)


def _undecodable(coding: str | None, detail: object) -> InvalidRequest:
    return InvalidRequest(
        f"request body is not valid {coding} (Content-Encoding): {detail}",
        param="content-encoding",
    )
