"""An answer llmd sends before it has read its request's whole body ends the connection: it
says `Connection: close`, the connection closes at once (not at the keep-alive timeout), and
the rest of a declared body is not read; a request whose body came whole keeps its
connection after the same refusal."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import BinaryIO

import pytest

from llmd.admission.tenants import hash_key
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

KEY = "key-early"
KEEPALIVE_S = 20.0  # what a connection left open by mistake would last
READ_TIMEOUT_S = 10.0
CHAT = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}).encode()
AUTH = b"authorization: Bearer " + KEY.encode() + b"\r\n"
JSON_TYPE = b"content-type: application/json\r\n"

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n"


def chat(extra: bytes, framing: bytes, body: bytes) -> bytes:
    """A chat POST with `extra` header lines, `framing` (its length or transfer coding
    lines) and `body` as sent (whole or not)."""
    return HEAD + extra + framing + b"\r\n" + body


LENGTH = b"content-length: %d\r\n" % len(CHAT)
CHUNKED = b"transfer-encoding: chunked\r\n"
# (what, the request as sent: each with its body's end still to come)
STALLED = [
    ("no key, body half sent", chat(JSON_TYPE, LENGTH, CHAT[:10])),
    ("no key, 100-continue", chat(JSON_TYPE + b"expect: 100-continue\r\n", LENGTH, b"")),
    ("no key, chunked", chat(JSON_TYPE, CHUNKED, b"a\r\n" + CHAT[:10] + b"\r\n")),
    ("not JSON typed", chat(AUTH + b"content-type: text/plain\r\n", LENGTH, CHAT[:10])),
]


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with one API key, a 20 s keep-alive and a 10 s read timeout."""
    workdir = short_tmpdir("llmd-ea-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(f'[tenants.t]\nkeys = ["{hash_key(KEY)}"]\n')
    config = sim_config(
        ensure_tiny_model(),
        server={"keepalive_timeout_s": KEEPALIVE_S, "read_timeout_s": READ_TIMEOUT_S},
        admission={"tenants_file": str(tenants)},
    )
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def read_answer(reader: BinaryIO) -> tuple[int, dict[bytes, bytes], bytes]:
    """One answer from `reader` (a socket's binary file): status, headers (lower-case names),
    body (its Content-Length)."""
    status = int(reader.readline().split()[1])
    headers: dict[bytes, bytes] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, reader.read(int(headers.get(b"content-length", b"0")))


def closed(sock: socket.socket) -> bool:
    """Whether the server closes `sock` (sending nothing more) well before the keep-alive
    timeout would: a connection kept alive by mistake fails here, not at KEEPALIVE_S."""
    sock.settimeout(KEEPALIVE_S / 2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


@pytest.mark.parametrize(("what", "request_bytes"), STALLED, ids=[w for w, _ in STALLED])
def test_an_early_refusal_of_a_stalled_body_closes_the_connection(
    llmd: LlmdProcess, what: str, request_bytes: bytes
) -> None:
    """A request refused before its body's end came (401 without a key, 415 not JSON; the
    body stalled, awaiting 100 Continue, or chunked): the answer says Connection: close and
    the connection closes at once, not at keepalive_timeout_s."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        sock.sendall(request_bytes)
        status, headers, body = read_answer(sock.makefile("rb"))
        assert status in (401, 415), (what, body)
        assert headers.get(b"connection") == b"close", (what, headers)
        assert closed(sock), what


def test_a_declared_length_over_the_limit_is_413_and_its_body_is_not_read(
    llmd: LlmdProcess,
) -> None:
    """Content-Length 999,999,999: 413 body_too_large with Connection: close, the connection
    closes, and llmd reads no more than a little of the body: a client that sends 64 MiB of
    it anyway is reset (where llmd would otherwise take all of it)."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        sock.sendall(chat(AUTH + JSON_TYPE, b"content-length: 999999999\r\n", b""))
        status, headers, body = read_answer(sock.makefile("rb"))
        assert status == 413 and json.loads(body)["error"]["code"] == "body_too_large"
        assert headers.get(b"connection") == b"close", headers
        assert closed(sock)
        sock.settimeout(30)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            sock.sendall(b"x" * (64 << 20))


def test_an_early_refusal_of_a_whole_body_keeps_the_connection(llmd: LlmdProcess) -> None:
    """On one connection: a request without a key sent whole is 401 and the connection stays
    (no Connection: close; the next request is served on it); the same request with its body
    cut short then ends it."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        reader = sock.makefile("rb")
        sock.sendall(chat(JSON_TYPE, LENGTH, CHAT))
        status, headers, _ = read_answer(reader)
        assert status == 401 and b"connection" not in headers, headers
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: llmd\r\n\r\n")
        status, headers, _ = read_answer(reader)
        assert status == 200 and b"connection" not in headers, headers
        sock.sendall(chat(JSON_TYPE, LENGTH, CHAT[:10]))
        status, headers, _ = read_answer(reader)
        assert status == 401 and headers.get(b"connection") == b"close", headers
        assert closed(sock)
