"""A client that stops reading its stream, on a raw socket with a tiny receive buffer, and
what llmd counts of such clients."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.llmd_process import LlmdProcess

# 900 streamed chat tokens of the tiny model: some 150 KiB of events, more than a client's
# 4 KiB receive buffer, llmd's send buffer and uvicorn's 64 KiB hold.
LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 900,
    "stream": True,
    "ignore_eos": True,
}

# A stream longer than the buffers between llmd and a client that stopped reading can hold
# (the client's 4 KiB, llmd's send buffer, uvicorn's 64 KiB: some 80 KiB), whatever the load: an
# answer's bytes are mostly its events' framing, and a loaded simulator packs several tokens
# into one event (measured on 2 busy cores: 900 tokens in 170 to 470 events, 35 to 100 KiB,
# against 600 events, 130 KiB, idle), so 900 tokens could all fit in those buffers and llmd
# never wait on the client. 4,000 tokens make it past them at any load; as 8 choices of 500
# (`n`, each choice its own events) the engine makes them in 500 steps, not 4,000, so it is
# done long before a send timeout of seconds cuts the client (measured at a load of 7-8, two
# runs beside each other: 0.2-3.2 s against 5.9-11.4 s as one choice of 4,000; 190-260 KiB
# reached the client, against 130-210 KiB).
HELD = {**LONG, "max_tokens": 500, "n": 8}
HELD_TOKENS = 500 * 8  # the engine's generation tokens for HELD


def stalled_reader(port: int, body: dict[str, Any] = LONG) -> socket.socket:
    """Send `body` to /v1/chat/completions over a socket with a tiny receive buffer; nothing
    is read from it (the caller reads, or closes it)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    payload = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def read_at_least(sock: socket.socket, count: int) -> int:
    """Read from `sock` until `count` bytes came (or it closed); how many did."""
    received = 0
    while received < count and (chunk := sock.recv(65536)):
        received += len(chunk)
    return received


def served_whole(base_url: str, body: dict[str, Any]) -> bool:
    """One stream of `body` to /v1/chat/completions, read whole: whether it was answered 200
    in full (its last event `[DONE]`, and no event an error)."""
    answer = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    events = [e.removeprefix("data: ") for e in answer.text.split("\n\n") if e.strip()]
    if answer.status_code != 200 or not events or events[-1] != "[DONE]":
        return False
    return not any("error" in json.loads(event) for event in events[:-1])


def slow_consumers(llmd: LlmdProcess) -> float:
    """Requests llmd_requests_total counts cut off by the send timeout (aborted,
    `slow_consumer`)."""
    families = text_string_to_metric_families(httpx.get(llmd.base_url + "/metrics").text)
    return sum(
        sample.value
        for family in families
        for sample in family.samples
        if sample.name == "llmd_requests_total"
        and sample.labels["outcome"] == "aborted"
        and sample.labels["code"] == "slow_consumer"
    )
