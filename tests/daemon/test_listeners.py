"""The daemon's listening sockets."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from typing import Any

from llmd.config import ServerConfig
from llmd.daemon.listeners import embedded_server
from llmd.proxy.protocol import bounded_protocol
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until


def test_a_port_in_use_is_named_with_the_key_that_sets_it() -> None:
    """`llmd serve` on a port in use exits 1 saying which address and how to choose another
    (it said only "[Errno 98] Address already in use"), without Python's "[Errno 98]"."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        workdir = short_tmpdir("llmd-port-")
        config = workdir / "llmd.toml"
        config.write_text(sim_config(ensure_tiny_model()))
        done = subprocess.run(
            [
                *(sys.executable, "-m", "llmd.cli", "serve", "--config", str(config)),
                *("--listen", f"127.0.0.1:{port}", "--runtime-dir", str(workdir / "run")),
                *("--state-dir", str(workdir / "state")),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1
    assert (
        f"llmd: cannot start: cannot listen on 127.0.0.1:{port}: Address already in "
        "use; choose another address with server.listen in the config or --listen HOST:PORT"
    ) in done.stderr


async def test_the_client_is_the_connections_peer() -> None:
    """A request from 127.0.0.1 that says `X-Forwarded-For` and `X-Forwarded-Proto` reaches
    the app with its peer's address and plain http (no proxy-headers layer between)."""
    seen: list[tuple[object, object]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen.append((scope["client"][0], scope["scheme"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sock = socket.create_server(("127.0.0.1", 0))
    server = embedded_server(app, "off", bounded_protocol(ServerConfig))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    assert await until(lambda: server.started, timeout_s=10)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        writer.write(
            b"GET / HTTP/1.1\r\nhost: t\r\nx-forwarded-for: 203.0.113.9\r\n"
            b"x-forwarded-proto: https\r\n\r\n"
        )
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 204")
        writer.close()
        await writer.wait_closed()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
    assert seen == [("127.0.0.1", "http")]
