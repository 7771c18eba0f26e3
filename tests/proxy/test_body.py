"""Reading a request body: the JSON layer refuses what would make a later stage raise (naming the
field), content types and codings are checked before reading, and decoding is bounded."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import pytest

from llmd.errors import BodyTooLarge, InvalidRequest, UnsupportedMediaType
from llmd.proxy.body import (
    MAX_DEPTH,
    body_coding,
    check_content_type,
    check_length,
    parse_object,
    read_body,
    without_bom,
)


def chunks(data: bytes, size: int = 1000) -> Any:
    """An ASGI `receive` giving `data` in chunks of `size` bytes."""
    parts = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    messages = iter(
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    )

    async def receive() -> dict[str, Any]:
        return next(messages)

    return receive


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            b'{"messages": [{"role": "user", "content": "emoji \\ud83d"}]}',
            "messages",
            "messages[0].content",
        ),
        (b'{"model": "\\udc00x"}', "model", "lone UTF-16 surrogate"),
        (b'{"x\\ud800": 1}', "x\\ud800", "lone UTF-16 surrogate"),  # shown escaped
        (b'{"max_tokens": NaN}', None, "NaN"),
        (b'{"temperature": Infinity}', None, "Infinity"),
        (b'{"temperature": -Infinity}', None, "-Infinity"),
        (b'{"temperature": 1e999}', None, "too large"),
        (b'{"max_tokens": ' + b"9" * 5000 + b"}", None, "5,000 digits"),
        (b'{"n": 1, "n": 2}', None, "appears twice"),
        (b'{"a": "tab\tinside"}', None, "not valid JSON"),
        (b'{"a": ' + b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5) + b"}", "a", "deeper"),
        (b"[" * 100_000 + b"]" * 100_000, None, "deeper"),
        ('{"a": "é"}'.encode("utf-16"), None, "UTF-8"),
        ('{"a": "é"}'.encode("latin-1"), None, "UTF-8"),
        (b"[1, 2]", None, "must be a JSON object"),
        (b"", None, "not valid JSON"),
    ],
)
def test_the_json_layer_refuses_with_400_naming_the_field(
    body: bytes, param: str | None, words: str
) -> None:
    """Lone surrogates, NaN/Infinity, overflowing numbers, duplicate keys, raw control
    characters, deep nesting and non-UTF-8 text are each a 400 saying what is wrong (and where:
    the JSON path in the message, the top-level field in `param`, a lone surrogate in them
    escaped), never an exception."""
    with pytest.raises(InvalidRequest) as caught:
        parse_object(body)
    assert words in caught.value.message
    assert caught.value.param == param


def test_what_the_json_layer_accepts() -> None:
    """A byte order mark is ignored (RFC 8259 §8.1); surrogate pairs, nesting up to the limit,
    characters outside the BMP and big integers parse."""
    assert parse_object(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert without_bom(b'\xef\xbb\xbf{"a": 1}') == b'{"a": 1}'
    assert parse_object(b'{"a": "\\ud83d\\ude00 \xf0\x9f\x98\x80"}') == {"a": "😀 😀"}
    deep = b'{"a": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert isinstance(parse_object(deep)["a"], list)
    assert parse_object(b'{"n": ' + b"9" * 400 + b"}")["n"] == int("9" * 400)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (b"application/json", True),
        (b"Application/JSON; charset=utf-8", True),
        (b"application/json;charset=latin-1", True),  # RFC 8259 §11: no charset is defined
        (b"text/plain", False),
        (b"application/x-www-form-urlencoded", False),
        (b"multipart/form-data; boundary=x", False),
        (b"application/jsonx", False),
        (None, False),
    ],
)
def test_only_application_json_is_read(value: bytes | None, accepted: bool) -> None:
    """application/json with any parameters passes; anything else (or none) is a 415
    `invalid_request` naming the header."""
    headers = [] if value is None else [(b"content-type", value)]
    if accepted:
        check_content_type(headers)
        return
    with pytest.raises(UnsupportedMediaType) as caught:
        check_content_type(headers)
    assert caught.value.status == 415 and caught.value.code == "invalid_request"
    assert caught.value.param == "content-type"


def test_content_codings() -> None:
    """identity, gzip, x-gzip and deflate are read; any other (or two) is a 415 that lists the
    codings llmd reads in Accept-Encoding (RFC 9110 §15.5.16)."""
    assert body_coding([]) is None
    assert body_coding([(b"content-encoding", b"identity")]) is None
    assert body_coding([(b"content-encoding", b"GZIP")]) == "gzip"
    assert body_coding([(b"content-encoding", b"x-gzip")]) == "x-gzip"
    assert body_coding([(b"content-encoding", b"deflate")]) == "deflate"
    for value in (b"br", b"zstd", b"gzip, gzip", b"compress"):
        with pytest.raises(UnsupportedMediaType) as caught:
            body_coding([(b"content-encoding", value)])
        assert (b"accept-encoding", b"gzip, deflate") in caught.value.headers()


async def test_gzip_and_deflate_bodies_are_decoded() -> None:
    """A gzip or deflate (zlib) body is read as the JSON it encodes."""
    data = b'{"prompt": "' + b"hello " * 1000 + b'"}'
    assert await read_body(chunks(gzip.compress(data), 100), 1 << 20, "gzip") == data
    assert await read_body(chunks(zlib.compress(data), 7), 1 << 20, "deflate") == data


async def test_a_small_bomb_never_grows_past_the_limit() -> None:
    """64 KiB of gzip that would decode to 64 MiB is refused (413) once past the limit, and
    decoding never holds more than the limit plus one byte."""
    bomb = gzip.compress(b"\0" * (64 << 20))
    assert len(bomb) < 100_000
    with pytest.raises(BodyTooLarge, match="once decoded"):
        await read_body(chunks(bomb, 65536), 1 << 20, "gzip")


async def test_broken_or_truncated_encodings_are_400() -> None:
    """Bytes that are not gzip, a stream cut short, or data after its end: 400 naming
    Content-Encoding."""
    whole = gzip.compress(b'{"a": 1}')
    for body in (b"not gzip at all", whole[:-4], whole + b"junk"):
        with pytest.raises(InvalidRequest) as caught:
            await read_body(chunks(body), 1 << 20, "gzip")
        assert caught.value.param == "content-encoding"


async def test_the_limit_holds_as_sent_too() -> None:
    """A body over the limit as sent is refused without reading on."""
    with pytest.raises(BodyTooLarge):
        await read_body(chunks(b"x" * 5000, 1000), 4096)


async def test_the_reader_says_what_it_keeps_as_each_chunk_arrives() -> None:
    """`taking` hears the decoded size kept so far after each chunk, and what it raises ends
    the read before the next chunk (the body budget refusing a body as it grows)."""
    heard: list[int] = []
    data = b'{"prompt": "' + b"hello " * 1000 + b'"}'
    assert await read_body(chunks(data, 2500), 1 << 20, taking=heard.append) == data
    assert heard == [2500, 5000, len(data)]
    inflated: list[int] = []
    await read_body(chunks(gzip.compress(data), 100), 1 << 20, "gzip", taking=inflated.append)
    assert inflated[-1] == len(data) and inflated == sorted(inflated)

    def refuse_past(size: int) -> None:
        heard.append(size)
        if size > 3000:
            raise BodyTooLarge("over the budget")

    heard.clear()
    with pytest.raises(BodyTooLarge, match="budget"):
        await read_body(chunks(data, 2500), 1 << 20, taking=refuse_past)
    assert heard == [2500, 5000]


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    """A Content-Length over the limit is 413 body_too_large naming it; at or under the
    limit, or absent, nothing is refused."""
    with pytest.raises(BodyTooLarge, match="4097 bytes"):
        check_length([(b"content-length", b"4097")], 4096)
    check_length([(b"content-length", b"4096")], 4096)
    check_length([], 4096)


async def test_a_body_that_came_whole_is_read_without_a_timer(monkeypatch: Any) -> None:
    """`whole`: the body is read as it is, with no `asyncio.timeout` armed (issue 37: 2 µs a
    request); without it, a read timeout still arms one."""
    armed: list[float | None] = []
    real = asyncio.timeout

    def timeout(delay: float | None) -> Any:
        armed.append(delay)
        return real(delay)

    monkeypatch.setattr(asyncio, "timeout", timeout)
    data = b'{"a": 1}'
    assert await read_body(chunks(data), 1 << 20, timeout_s=5.0, whole=True) == data
    assert armed == []
    assert await read_body(chunks(data), 1 << 20, timeout_s=5.0) == data
    assert armed == [5.0]
