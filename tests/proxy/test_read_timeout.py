"""A client that stalls while sending its request holds nothing for long (server.read_timeout_s):
a head or body not all there in time gets 408 request_timeout and its connection closes, a
connection that sends nothing is closed, a stalled body holds of the body budget only the bytes
it sent, and gives them back; a declared body over the limit is refused before it is read."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

TIMEOUT_S = 1.0
BUDGET = 100_000
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with a 1 s read timeout and a body budget of 100,000 bytes."""
    config = sim_config(
        ensure_tiny_model(),
        server={"read_timeout_s": TIMEOUT_S},
        admission={"max_queued_bytes": BUDGET},
    )
    with LlmdProcess.running(config, "llmd-rt-") as process:
        yield process


def answer_to(llmd: LlmdProcess, sent: bytes) -> tuple[bytes, float]:
    """Send `sent` and then nothing; what the server answers until it closes, and after how
    many seconds it closed (bounded at 30 s: a server that never closes fails the test)."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer, time.monotonic() - started


def status_and_error(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def test_a_stalled_head_is_408_and_closed(llmd: LlmdProcess) -> None:
    """Half a request head, then silence: 408 request_timeout (OpenAI-shaped) and the
    connection closes, about read_timeout_s after it opened."""
    answer, took_s = answer_to(llmd, b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n")
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", answer
    assert b"connection: close" in answer.lower()
    assert took_s >= TIMEOUT_S * 0.9


def test_a_connection_that_sends_nothing_is_closed(llmd: LlmdProcess) -> None:
    """A connection that never sends a byte is closed without an answer."""
    answer, took_s = answer_to(llmd, b"")
    assert answer == b"" and took_s >= TIMEOUT_S * 0.9


def stalled_answer(stalled: socket.socket) -> bytes:
    answer = b""
    while chunk := stalled.recv(65536):
        answer += chunk
    return answer


def post(llmd: LlmdProcess, body: bytes) -> httpx.Response:
    return httpx.post(llmd.base_url + "/v1/chat/completions", content=body,
                      headers={"content-type": "application/json"}, timeout=30)  # fmt: skip


def test_a_promised_body_costs_only_what_arrived(llmd: LlmdProcess) -> None:
    """A body declared at 90,000 bytes of the 100,000-byte budget and a chunked one (no
    length), 10 bytes of each arrived: while they stall, a 40,000-byte request is served (a
    promise reserves nothing); then each stalled one gets 408 request_timeout."""
    heads = [
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n"
        b"content-type: application/json\r\ncontent-length: 90000\r\n\r\n" + b'{"model": ',
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\ncontent-type: application/json"
        b"\r\ntransfer-encoding: chunked\r\n\r\na\r\n" + b'{"model": \r\n',
    ]
    body = json.dumps({**CHAT, "padding": "x" * 40_000}).encode()
    with contextlib.ExitStack() as stack:
        stalled = []
        for head in heads:
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", llmd.port), 30))
            sock.sendall(head)
            stalled.append(sock)
        served = post(llmd, body)
        answers = [stalled_answer(sock) for sock in stalled]
    assert served.status_code == 200, served.text
    for answer in answers:
        status, error = status_and_error(answer)
        assert status == 408 and error["code"] == "request_timeout", answer


def test_a_stalled_chunked_body_holds_what_it_sent_then_gives_it_back(llmd: LlmdProcess) -> None:
    """A chunked body (no Content-Length) that sent 70,000 bytes and stalls holds them: a
    40,000-byte request does not fit the 100,000-byte budget (429 queue_full) while it stalls;
    once it got its 408 the same request is served."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    sent = b'{"model": "tiny", "padding": "' + b"x" * 70_000
    body = json.dumps({**CHAT, "padding": "x" * 40_000}).encode()
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as stalled:
        stalled.sendall(head + b"%x\r\n%s\r\n" % (len(sent), sent))
        refused = post(llmd, body)
        # The stalled body's bytes may still be on their way to llmd when the other one comes.
        deadline = time.monotonic() + 10
        while refused.status_code == 200 and time.monotonic() < deadline:
            refused = post(llmd, body)
        answer = stalled_answer(stalled)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    assert int(refused.headers["retry-after"]) >= 1
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", answer
    served = post(llmd, body)
    assert served.status_code == 200, served.text


def test_a_declared_length_over_the_limit_is_413_before_the_body(llmd: LlmdProcess) -> None:
    """A Content-Length over server.max_body_bytes is 413 body_too_large as soon as the head
    arrives, body unsent (not a 408 once read_timeout_s has passed)."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n"
        b"content-type: application/json\r\ncontent-length: 4194305\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        sock.sendall(head)
        reader = sock.makefile("rb")
        status_line = reader.readline()
        length = 0
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        error = json.loads(reader.read(length))["error"]
    assert int(status_line.split()[1]) == 413, status_line
    assert error["code"] == "body_too_large" and "4194305" in error["message"]


def test_the_deadline_runs_per_request_not_per_connection(llmd: LlmdProcess) -> None:
    """On one kept-alive connection, a second request sent once the connection has been open
    longer than read_timeout_s (idle between the two) is served: 200 both times."""
    body = json.dumps(CHAT).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        reader = sock.makefile("rb")
        statuses = []
        for number in range(2):
            if number:
                time.sleep(TIMEOUT_S * 1.5)  # the idle time under test, within keep-alive's 5 s
            sock.sendall(request)
            statuses.append(int(reader.readline().split()[1]))
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            reader.read(length)
    assert statuses == [200, 200]
