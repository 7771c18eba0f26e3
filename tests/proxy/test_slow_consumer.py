"""A client that stops reading its stream is cut off (upstream aborted) while a parallel
stream keeps its pace, through a real `llmd serve` on the simulator."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import httpx

from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.slow_client import (
    HELD,
    HELD_TOKENS,
    LONG,
    read_at_least,
    served_whole,
    slow_consumers,
    stalled_reader,
)
from tests.support.waiting import wait_for


def stream_seconds(base_url: str, max_tokens: int) -> float:
    """Read one stream to its end; how long it took."""
    started = time.monotonic()
    body = {**LONG, "max_tokens": max_tokens}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for _ in r.iter_bytes():
            pass
    return time.monotonic() - started


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


def test_a_client_that_holds_its_stream_is_no_engine_stall() -> None:
    """A client that stops reading after its engine finished generating holds llmd off its
    stream past the stall timeout: the watchdog does not take that for a stall (no restart,
    no engine_stalled); the send timeout cuts that client off as a slow consumer, and the
    engine goes on serving other streams, the same process."""
    config = sim_config(
        ensure_tiny_model(),
        ("--step-base-ms", "0.5"),
        # 8 s: past the 0.2-3.2 s the engine took to make HELD at a load of 7-8 (the 4,000
        # tokens as one choice took 5.9-11.4 s, and a 10 s timeout cut them at a load of 10)
        server={"send_timeout_s": 8.0, "send_buffer_bytes": 4096},
        engine={"stall_timeout_s": 1.0},  # a request's idle timeout: 2 s
        telemetry={"engine_interval_s": 0.1},
    )
    with contextlib.ExitStack() as stack:
        llmd = LlmdProcess.start(config)
        stack.callback(llmd.stop)
        llmd.wait_ready(timeout_s=60)
        pid = llmd.admin_status()["engine"]["pid"]
        stalled = stalled_reader(llmd.port, HELD)  # more than the buffers hold, at any load
        stack.callback(stalled.close)
        generated, _ = wait_for_gauge(
            llmd.engine_socket,
            "vllm:generation_tokens_total",
            lambda v: v >= HELD_TOKENS,
            60,
        )
        assert generated, llmd.log_tail()  # the engine is done; llmd holds the rest for the client
        assert read_at_least(stalled, 32768) >= 32768  # llmd sends more, then waits again
        # While llmd holds the slow client's stream:
        beside = served_whole(llmd.base_url, {**LONG, "max_tokens": 300})
        cut = wait_for(lambda: "client_too_slow" in llmd.log_path.read_text(), 30)
        assert cut, llmd.log_tail()
        assert beside and served_whole(llmd.base_url, {**LONG, "max_tokens": 50})
        engine = llmd.admin_status()["engine"]
        assert engine["restarts"] == 0 and engine["pid"] == pid, engine
        stalls = [line for line in llmd.log_path.read_text().splitlines() if "stalled" in line]
        assert not stalls, stalls
        assert wait_for(lambda: slow_consumers(llmd) == 1, 10)


def tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of `sock` (struct tcp_info's first byte: 1 established, 7 closed
    by a reset, 8 the peer's end received)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def test_a_client_that_never_reads_does_not_keep_its_connection() -> None:
    """A client that never reads a 400-token stream: whether the send timeout cut it off or
    (on a loaded machine, fewer and larger events) every send went into the buffers and the
    answer ended, bytes wait unsent in its connection. Once the client has taken none of them
    for the send timeout, the connection is reset, not kept open for ever by a close that
    waits to send them; llmd serves on."""
    config = sim_config(
        ensure_tiny_model(),
        ("--step-base-ms", "0.5"),
        server={"send_timeout_s": 1.0, "send_buffer_bytes": 4096},
    )
    with LlmdProcess.running(config) as llmd:
        # 400 tokens: some 30-60 KiB of events, past the kernel's buffers (a few KiB each
        # way): what they do not hold waits in the transport (uvicorn's 64 KiB or more).
        stalled = stalled_reader(llmd.port, {**LONG, "max_tokens": 400})
        with contextlib.closing(stalled):
            ended = wait_for(lambda: "request_finished" in llmd.log_path.read_text(), 30)
            assert ended, llmd.log_tail()
            assert wait_for(lambda: tcp_state(stalled) != ESTABLISHED, 20), llmd.log_tail()
            assert tcp_state(stalled) == CLOSED_BY_RESET
        assert "connection_aborted" in llmd.log_path.read_text()
        assert served_whole(llmd.base_url, {**LONG, "max_tokens": 50})  # llmd serves on


ESTABLISHED, CLOSED_BY_RESET = 1, 7
