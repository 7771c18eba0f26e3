"""The request head is bounded as it arrives (server.max_header_bytes, server.max_headers): a
431 without reading on, other clients unaffected; malformed requests get an OpenAI-shaped 400."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

CHUNK = 64 * 1024
# More than loopback's send and receive buffers hold (a few MB): a sender refused early is cut
# off well before this much.
SOCKET_BUFFERS = 16 << 20


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with the default limits (32 KiB of head, 100 headers)."""
    with LlmdProcess.running(sim_config(ensure_tiny_model()), "llmd-p-") as process:
        yield process


def send_head(llmd: LlmdProcess, header_bytes: int, header_size: int) -> tuple[int, bytes]:
    """Send `GET /health` with `header_bytes` of headers, each `header_size` bytes long, then
    read the answer: (bytes of headers the server took before it closed, the answer)."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: llmd\r\n")
        sent = 0
        header = b"x-big: " + b"a" * (header_size - 9) + b"\r\n"
        try:
            while sent < header_bytes:
                sock.sendall(header * max(1, CHUNK // len(header)))
                sent += len(header) * max(1, CHUNK // len(header))
            sock.sendall(b"\r\n")
        except OSError:  # the server answered and closed: the rest was never read
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    return sent, answer


def status_and_error(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


@pytest.mark.parametrize(
    ("total", "each"), [(1 << 20, 1 << 20), (64 << 20, 8 << 10), (64 << 20, 100)]
)
def test_an_oversized_head_is_431_without_reading_on(
    llmd: LlmdProcess, total: int, each: int
) -> None:
    """One 1 MB header, or headers totalling 64 MB (large ones, or many small ones): 431
    headers_too_large, OpenAI-shaped, and the server closes before taking the rest (seen for
    64 MB: the sockets' buffers take a few MB before the refusal lands)."""
    sent, answer = send_head(llmd, total, each)
    status, error = status_and_error(answer)
    assert status == 431 and error["code"] == "headers_too_large"
    if total > SOCKET_BUFFERS:
        assert sent < SOCKET_BUFFERS
    with httpx.Client(base_url=llmd.base_url, timeout=10) as client:
        assert client.get("/health").status_code == 200


def test_heads_within_the_limits_pass(llmd: LlmdProcess) -> None:
    """An 8 KiB bearer token and 90 headers are fine; 101 are a 431 (on /v1/messages in
    Anthropic's shape)."""
    headers = {f"x-h{i}": "v" for i in range(88)}
    headers["authorization"] = "Bearer " + "k" * 8192
    with httpx.Client(base_url=llmd.base_url, timeout=10) as client:
        assert client.get("/health", headers=headers).status_code == 200
        over = client.get("/health", headers={f"x-h{i}": "v" for i in range(101)})
        assert over.status_code == 431
        assert "more than 100 headers" in over.json()["error"]["message"]
        messages = client.post("/v1/messages", headers={f"x-h{i}": "v" for i in range(101)})
        assert messages.status_code == 431  # Anthropic's shape on a Messages path
        assert messages.json()["error"]["type"] == "request_too_large"


def test_other_clients_are_served_while_heads_are_refused(llmd: LlmdProcess) -> None:
    """Twenty 64 MB heads in a row are each cut short; /health answers between them."""
    with httpx.Client(base_url=llmd.base_url, timeout=10) as client:
        for _ in range(20):
            sent, answer = send_head(llmd, 64 << 20, 8 << 10)
            assert answer.startswith(b"HTTP/1.1 431") and sent < SOCKET_BUFFERS
            assert client.get("/health").status_code == 200


def test_a_malformed_request_is_an_openai_shaped_400(llmd: LlmdProcess) -> None:
    """A request the HTTP parser refuses gets a JSON 400, logged by llmd (rate-limited), not
    uvicorn's plain-text one."""
    with socket.create_connection(("127.0.0.1", llmd.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n")
        answer = sock.recv(65536)
    status, error = status_and_error(answer)
    assert status == 400 and error["code"] == "invalid_request"
    assert b"content-type: application/json" in answer
    assert "request_head_refused" in llmd.log_path.read_text()
