"""Idle kept-alive client connections (server.keepalive_timeout_s): open longer than common client
pools keep one, closed once past the configured time."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from llmd.config import load_config
from llmd.errors import ConfigError
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

REQUEST = b"GET /health HTTP/1.1\r\nhost: llmd\r\n\r\n"


def answer(sock: socket.socket) -> bytes:
    """One whole answer to GET /health (its head and its short body)."""
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def closed_within(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server closes the connection within `timeout_s` (it sends nothing else)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_connection_idle_for_20_s_is_still_served() -> None:
    """With the default keep-alive (120 s), a connection left idle 20 s after its answer is
    still open and serves the next request."""
    with (
        LlmdProcess.running(sim_config(ensure_tiny_model()), "llmd-k-") as llmd,
        socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock,
    ):
        sock.sendall(REQUEST)
        assert answer(sock).startswith(b"HTTP/1.1 200")
        assert not closed_within(sock, 20.0)
        sock.settimeout(30)
        sock.sendall(REQUEST)
        assert answer(sock).startswith(b"HTTP/1.1 200")


def test_an_idle_connection_closes_after_the_configured_time() -> None:
    """server.keepalive_timeout_s = 0.5: an idle connection is closed soon after its answer."""
    config = sim_config(ensure_tiny_model(), server={"keepalive_timeout_s": 0.5})
    with (
        LlmdProcess.running(config, "llmd-k-") as llmd,
        socket.create_connection(("127.0.0.1", llmd.port), timeout=30) as sock,
    ):
        sock.sendall(REQUEST)
        assert answer(sock).startswith(b"HTTP/1.1 200")
        assert closed_within(sock, 10.0)


def test_a_keepalive_of_zero_is_refused(tmp_path: Path) -> None:
    """The keep-alive must be some time: 0 is a config error naming the key."""
    path = tmp_path / "llmd.toml"
    path.write_text('[server]\nkeepalive_timeout_s = 0\n[engine]\nmodel = "m"\n')
    with pytest.raises(ConfigError, match=r"server\.keepalive_timeout_s"):
        load_config(path)
