"""Every error llmd sends, read off the wire: OpenAI-shaped, no header twice, `x-request-id` on
each and `x-llmd-queue-ms` on each answer on /v1; what llmd does not serve (a WebSocket
upgrade, a transfer coding but chunked) is one of these errors, not a bare status."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import engine_held, until

KEY = "key-headers"
KEYED = {"authorization": f"Bearer {KEY}"}
TIMEOUT_S = 1.0
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
BODY = json.dumps(CHAT).encode()
AUTH = b"authorization: Bearer " + KEY.encode() + b"\r\n"
CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n" + AUTH
JSON_TYPE = b"content-type: application/json\r\n"


def post(
    body: bytes, extra: bytes = b"", framing: bytes | None = None, typed: bytes = JSON_TYPE
) -> bytes:
    """A chat POST with `body`, `extra` header lines, Content-Type line `typed` and
    Content-Length (or `framing`)."""
    framing = framing if framing is not None else b"content-length: %d\r\n" % len(body)
    return CHAT_HEAD + typed + extra + framing + b"connection: close\r\n\r\n" + body


def get(target: bytes, extra: bytes = b"", method: bytes = b"GET") -> bytes:
    """A request without a body; `extra` must end it (with Connection: close, or a header
    that makes the server close) or the server would keep the connection open."""
    return method + b" " + target + b" HTTP/1.1\r\nhost: llmd\r\n" + extra + b"\r\n"


WEBSOCKET = (
    b"connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n"
    b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)
# (what, the request as sent, status, code): each sent alone on its own connection.
ERRORS: list[tuple[str, bytes, int, str]] = [
    ("body not JSON", post(b"{"), 400, "invalid_request"),
    ("head malformed", get(b"/v1/models", b"host llmd\r\n"), 400, "invalid_request"),
    (
        "transfer coding gzip",
        post(b"", framing=b"transfer-encoding: gzip, chunked\r\n")
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY),
        400,
        "invalid_request",
    ),
    ("upgrade with a body", post(BODY, WEBSOCKET), 400, "invalid_request"),
    ("priority twice", post(BODY, b"x-llmd-priority: batch\r\n" * 2), 400, "invalid_request"),
    ("no key", get(b"/v1/models", b"connection: close\r\n"), 401, "invalid_api_key"),
    ("no route", get(b"/v1/nothing", AUTH + b"connection: close\r\n"), 404, "not_found"),
    ("no route off /v1", get(b"/nothing", b"connection: close\r\n"), 404, "not_found"),
    (
        "trailing slash",
        post(BODY).replace(b"/v1/chat/completions ", b"/v1/chat/completions/ ", 1),
        404,
        "not_found",
    ),
    (
        "trailing slash embeddings",
        post(BODY).replace(b"/v1/chat/completions ", b"/v1/embeddings/ ", 1),
        404,
        "not_found",
    ),
    ("no model", post(json.dumps({**CHAT, "model": "nope"}).encode()), 404, "model_not_found"),
    (
        "wrong method",
        get(b"/v1/models", AUTH + b"connection: close\r\n", b"DELETE"),
        405,
        "method_not_allowed",
    ),
    ("websocket", get(b"/v1/chat/completions", AUTH + WEBSOCKET), 405, "method_not_allowed"),
    ("head too slow", CHAT_HEAD, 408, "request_timeout"),
    (
        "body too slow",
        CHAT_HEAD + JSON_TYPE + b"content-length: 100\r\n\r\n{",
        408,
        "request_timeout",
    ),
    ("body too large", post(b"", framing=b"content-length: 99999999\r\n"), 413, "body_too_large"),
    ("not JSON typed", post(BODY, typed=b"content-type: text/plain\r\n"), 415, "invalid_request"),
    ("coding unknown", post(BODY, b"content-encoding: br\r\n"), 415, "invalid_request"),
    ("many headers", get(b"/v1/models", b"x-h: 1\r\n" * 101), 431, "headers_too_large"),
]


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd with an API key, a 1 s read timeout, one engine slot and an interactive queue of
    one request that times out after 1 s (so 429 and 503 can be had)."""
    workdir = short_tmpdir("llmd-eh-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(f'[tenants.t]\nkeys = ["{hash_key(KEY)}"]\ndefault_class = "interactive"\n')
    config = sim_config(
        ensure_tiny_model(),
        server={"read_timeout_s": TIMEOUT_S},
        admission={
            "tenants_file": str(tenants),
            "max_in_flight": 1,
            "batch_reserve": 0,
            "interactive": {"queue_size": 1, "queue_timeout_s": 1.0, "aging_s": 0.0},
        },
    )
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def exchange(llmd: LlmdProcess, request: bytes) -> tuple[bytes, list[tuple[str, str]], bytes]:
    """Send `request` on a fresh connection and read until the server closes it: the status
    line, the header lines as sent ((name lower-cased, value) in order), and the body."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = [(n.strip().lower(), v.strip()) for n, _, v in (h.partition(":") for h in lines)]
    return status_line.encode(), headers, body


def check_answer(
    headers: list[tuple[str, str]], body: bytes, status: int, code: str, on_v1: bool
) -> None:
    """The llmd headers and shape every error has (see the module docstring)."""
    names = [name for name, _ in headers]
    assert len(names) == len(set(names)), f"a header sent twice: {headers}"
    found = dict(headers)
    assert found["content-type"] == "application/json"
    assert int(found["content-length"]) == len(body)
    assert len(found["x-request-id"]) == 32
    if on_v1:
        assert found["x-llmd-queue-ms"].isdigit(), headers
    if status in (429, 503):
        assert int(found["retry-after"]) >= 1
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code


@pytest.mark.parametrize(("what", "request_", "status", "code"), ERRORS, ids=[e[0] for e in ERRORS])
def test_each_error_has_the_llmd_headers_once(
    llmd: LlmdProcess, what: str, request_: bytes, status: int, code: str
) -> None:
    """Each kind of error llmd answers, read raw: its status and code, OpenAI-shaped, no
    header name twice (RFC 9110 §5.3: none of these is a list), x-request-id, and
    x-llmd-queue-ms on a /v1 path (README, "Every response to a /v1 route")."""
    status_line, headers, body = exchange(llmd, request_)
    assert status_line.split()[1] == str(status).encode(), (status_line, body)
    on_v1 = b" /v1" in request_.split(b"\r\n", 1)[0]
    check_answer(headers, body, status, code, on_v1)


def test_429_and_503_have_the_llmd_headers_once(llmd: LlmdProcess) -> None:
    """With the engine's one slot held: one request queued and timed out (503 queue_timeout),
    one more past the full queue (429 queue_full), each read raw with the headers above."""

    async def scenario() -> list[tuple[bytes, list[tuple[str, str]], bytes]]:
        hang = {**CHAT, "sim_fault": "hang"}
        async with (
            httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client,
            engine_held(client, llmd, hang, KEYED),
        ):
            queued = asyncio.create_task(asyncio.to_thread(exchange, llmd, post(BODY)))
            assert await until(lambda: llmd.queue_depth("interactive") == 1, timeout_s=10)
            full = await asyncio.to_thread(exchange, llmd, post(BODY))
            return [full, await queued]

    full, timed_out = asyncio.run(scenario())
    assert full[0].split()[1] == b"429" and timed_out[0].split()[1] == b"503"
    check_answer(full[1], full[2], 429, "queue_full", True)
    check_answer(timed_out[1], timed_out[2], 503, "queue_timeout", True)


def test_a_header_value_past_ascii_is_shown_escaped(llmd: LlmdProcess) -> None:
    """A UTF-8 "é" in x-llmd-priority is quoted in the 400's message as its bytes, escaped
    ('caf\\xc3\\xa9'), never decoded as ISO-8859-1 into 'cafÃ©'."""
    _, _, body = exchange(llmd, post(BODY, "x-llmd-priority: café\r\n".encode()))
    message = json.loads(body)["error"]["message"]
    assert "got 'caf\\xc3\\xa9'" in message and "Ã" not in message


def test_an_upgrade_without_a_body_is_served_as_http_1_1(llmd: LlmdProcess) -> None:
    """A WebSocket handshake to /health is ignored as an upgrade (RFC 9110 §7.8): 200 over
    HTTP/1.1, and the connection closes after it (the parser reads nothing past it)."""
    status_line, headers, body = exchange(llmd, get(b"/health", WEBSOCKET))
    assert status_line.split()[1] == b"200" and json.loads(body) == {"status": "ok"}
    assert dict(headers)["connection"] == "close"


@pytest.mark.parametrize(
    "header",
    ["x-llmd-priority", "x-llmd-deadline-ms", "x-llmd-context-policy"],
)
def test_a_bad_control_header_is_named_in_param(llmd: LlmdProcess, header: str) -> None:
    """Every header error names its header in `param`, a bad value as a repeated one does."""
    sent = {**KEYED, header: "nonsense"}
    answer = httpx.post(f"{llmd.base_url}/v1/chat/completions", json=CHAT, headers=sent)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == header


def test_control_header_values_are_read_in_any_case(llmd: LlmdProcess) -> None:
    """`x-llmd-context-policy: CLAMP` is taken as `INTERACTIVE` is for the priority."""
    sent = {**KEYED, "x-llmd-priority": "INTERACTIVE", "x-llmd-context-policy": "CLAMP"}
    answer = httpx.post(f"{llmd.base_url}/v1/chat/completions", json=CHAT, headers=sent)
    assert answer.status_code == 200, answer.text
