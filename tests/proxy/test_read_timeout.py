"""A client that stalls while sending its request holds nothing for long (server.read_timeout_s):
a head or body not all there in time gets 408 request_timeout and its connection closes, a
connection that sends nothing is closed, and the body budget a stalled body reserved is free
again for other clients."""

from __future__ import annotations

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


def test_a_stalled_body_is_408_and_gives_its_budget_back(llmd: LlmdProcess) -> None:
    """A body declared at 90,000 bytes of the 100,000-byte budget, of which 10 arrive: while it
    stalls, another request does not fit (429 queue_full); then it gets 408 request_timeout
    and the other request is served."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\n"
        b"content-type: application/json\r\ncontent-length: 90000\r\n\r\n"
    )
    body = json.dumps({**CHAT, "padding": "x" * 20_000}).encode()
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as stalled:
        stalled.sendall(head + b'{"model": ')
        refused = httpx.post(llmd.base_url + "/v1/chat/completions", content=body,
                             headers={"content-type": "application/json"}, timeout=30)  # fmt: skip
        answer = b""
        while chunk := stalled.recv(65536):
            answer += chunk
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    status, error = status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout", answer
    served = httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert served.status_code == 200, served.text


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
