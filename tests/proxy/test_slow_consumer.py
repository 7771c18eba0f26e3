"""A client that stops reading its stream is cut off (upstream aborted) while a parallel
stream keeps its pace, through a real `llmd serve` on the simulator."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx

from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 900,
    "stream": True,
    "ignore_eos": True,
}


def stream_seconds(base_url: str, max_tokens: int) -> float:
    """Read one stream to its end; how long it took."""
    started = time.monotonic()
    body = {**LONG, "max_tokens": max_tokens}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for _ in r.iter_bytes():
            pass
    return time.monotonic() - started


def stalled_reader(port: int) -> socket.socket:
    """Send a long streaming request over a socket with a tiny receive buffer, never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps(LONG).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def test_stalled_reader_is_cut_off_without_slowing_a_parallel_stream() -> None:
    """The stalled stream's engine request is aborted within the send timeout (1 s) plus the
    time to fill its buffers; a parallel stream takes about as long as it does alone."""
    config = sim_config(
        ensure_tiny_model(), server={"send_timeout_s": 1.0, "send_buffer_bytes": 4096}
    )
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=60)
        alone = stream_seconds(llmd.base_url, 600)
        stalled = stalled_reader(llmd.port)
        held, _ = wait_for_gauge(
            llmd.engine_socket, "vllm:num_requests_running", lambda v: v >= 1, 5
        )
        assert held
        timings: list[float] = []
        parallel = threading.Thread(
            target=lambda: timings.append(stream_seconds(llmd.base_url, 600))
        )
        parallel.start()
        parallel.join(timeout=60)
        ended, _ = wait_for_gauge(
            llmd.engine_socket, "vllm:num_requests_running", lambda v: v == 0, 10
        )
        assert ended, "the stalled stream's engine request was not aborted"
        assert timings and timings[0] <= alone * 1.5 + 0.5, (timings, alone)
        assert "client_too_slow" in llmd.log_path.read_text()
        stalled.settimeout(5)
        received = b""
        while chunk := stalled.recv(65536):  # what was buffered, then the connection's end
            received += chunk
        assert received.startswith(b"HTTP/1.1 200") and b"[DONE]" not in received
        stalled.close()
    finally:
        llmd.stop()
