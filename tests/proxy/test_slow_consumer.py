"""A client that stops reading its stream is cut off (upstream aborted) while a parallel
stream keeps its pace, through a real `llmd serve` on the simulator."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

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


def read_at_least(sock: socket.socket, count: int) -> int:
    """Read from `sock` until `count` bytes came (or it closed); how many did."""
    received = 0
    while received < count and (chunk := sock.recv(65536)):
        received += len(chunk)
    return received


def streamed(base_url: str, max_tokens: int) -> str:
    """One stream read whole: its body."""
    body = {**LONG, "max_tokens": max_tokens}
    answer = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200
    return answer.text


def slow_consumers(llmd: LlmdProcess) -> float:
    """Requests llmd_requests_total counts cut off by the send timeout."""
    families = text_string_to_metric_families(httpx.get(llmd.base_url + "/metrics").text)
    return sum(
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == "llmd_requests_total"
        and sample.labels["outcome"] == "aborted"
        and sample.labels["code"] == "slow_consumer"
    )


def test_a_client_that_holds_its_stream_is_no_engine_stall() -> None:
    """A client that stops reading after its engine finished generating holds llmd off its
    stream past the stall timeout: the watchdog does not take that for a stall (no restart,
    no engine_stalled); the send timeout cuts that client off as a slow consumer, and the
    engine goes on serving other streams, the same process."""
    config = sim_config(
        ensure_tiny_model(),
        ("--step-base-ms", "0.5"),
        server={"send_timeout_s": 3.0, "send_buffer_bytes": 4096},
        engine={"stall_timeout_s": 1.0},  # a request's idle timeout: 2 s
        telemetry={"engine_interval_s": 0.1},
    )
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=60)
        pid = llmd.admin_status()["engine"]["pid"]
        stalled = stalled_reader(llmd.port)  # 900 tokens, some 150 KiB of events
        generated, _ = wait_for_gauge(
            llmd.engine_socket, "vllm:generation_tokens_total", lambda v: v >= 900, 20
        )
        assert generated  # the engine is done; llmd holds the rest for the client
        assert read_at_least(stalled, 32768) >= 32768  # llmd sends more, then waits again
        beside = streamed(llmd.base_url, 300)  # while llmd holds the slow client's stream
        cut = wait_for(lambda: "client_too_slow" in llmd.log_path.read_text(), 20)
        assert cut, llmd.log_tail()
        after = streamed(llmd.base_url, 50)
        for answer in (beside, after):
            assert answer.endswith("data: [DONE]\n\n") and '"error"' not in answer
        engine = llmd.admin_status()["engine"]
        assert engine["restarts"] == 0 and engine["pid"] == pid, engine
        stalls = [line for line in llmd.log_path.read_text().splitlines() if "stalled" in line]
        assert not stalls, stalls
        assert wait_for(lambda: slow_consumers(llmd) == 1, 10)
        stalled.close()
    finally:
        llmd.stop()
