"""The daemon's listeners: the public TCP socket and the admin Unix socket, the uvicorn server
embedded on each, and the running servers as one (`Listeners`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import uvicorn

from llmd.config import ServerConfig
from llmd.embedded import EmbeddedServer
from llmd.proxy.protocol import bounded_protocol


def bind_tcp(host: str, port: int, send_buffer_bytes: int = 0) -> socket.socket:
    """The public listener on `host:port`. Raises OSError (address in use, ...) whose message
    names the address and what sets it (server.listen, --listen)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_send_buffer(sock, send_buffer_bytes)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        raise OSError(
            exc.errno,
            f"cannot listen on {address}: {exc.strerror}; choose another address with "
            "server.listen in the config or --listen HOST:PORT",
        ) from exc
    sock.set_inheritable(False)
    return sock


def set_send_buffer(sock: socket.socket, send_buffer_bytes: int) -> None:
    """Set SO_SNDBUF on listener `sock` (0: leave the kernel's autotuned default). Each
    connection accepted from then on inherits it: it bounds what a slow client can leave
    buffered. Linux keeps twice the value (socket(7)); once set, a listener never goes back to
    autotuning."""
    if send_buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)


def send_buffer(sock: socket.socket) -> int:
    """The SO_SNDBUF that `set_send_buffer` gave `sock` (the kernel's value, halved)."""
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2


def bind_unix(path: Path, mode: int) -> socket.socket:
    """A Unix socket at `path` with `mode` (0660 for the admin API: root and llmd's group, the
    group being the daemon's own, `Group=llmd` under systemd). It is created under umask 0177,
    so it never exists with more than 0600 before the chmod. Raises OSError."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, mode)
    return sock


def embedded_server(
    app: object, lifespan: Literal["on", "off"], http: type[asyncio.Protocol]
) -> EmbeddedServer:
    """uvicorn serving ASGI `app` (on the sockets `serve(sockets=...)` is given) with `http`
    as its HTTP protocol, logging nothing of its own (llmd logs its requests itself), stopped
    by `should_exit` (llmd/embedded.py: awake once a second while idle)."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        lifespan=lifespan,
        log_config=None,
        access_log=False,
        # httptools, with the request head bounded by [server] (llmd/proxy/protocol.py)
        http=http,
        # HTTP/1.1 alone: an Upgrade (WebSocket included) is ignored, and the request
        # served as HTTP/1.1 (llmd/proxy/protocol.py)
        ws="none",
        # The client is the connection's peer: llmd reads no address or scheme from the scope,
        # and uvicorn's default (X-Forwarded-* trusted from 127.0.0.1) was one more ASGI layer
        # on every request (1.6 µs here, issue 37 item 3) that let any local process name
        # another client.
        proxy_headers=False,
        timeout_graceful_shutdown=5,
    )
    return EmbeddedServer(config)


class Listeners:
    """The daemon's running servers: the public proxy (`public`, its socket; `proxy`, its
    server) and the admin API, each a uvicorn server embedded in a task (`tasks`, by name:
    what the main loop watches). `server` gives the live `[server]` table (a reload replaces
    the config): the servers' HTTP protocol reads its limits at each request."""

    def __init__(self, server: Callable[[], ServerConfig]) -> None:
        self._server = server
        self.public: socket.socket | None = None
        self.proxy: EmbeddedServer | None = None
        self.servers: list[EmbeddedServer] = []
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start_proxy(self, app: object, sock: socket.socket, http: type[asyncio.Protocol]) -> None:
        """Serve the public `app` on `sock` (a TCP socket, `bind_tcp`'s) with `http` as its
        HTTP protocol, its lifespan on."""
        self.public = sock
        self.proxy = self.start("proxy", app, sock, "on", http)

    def start(
        self,
        name: str,
        app: object,
        sock: socket.socket,
        lifespan: Literal["on", "off"],
        http: type[asyncio.Protocol] | None = None,
    ) -> EmbeddedServer:
        """Serve ASGI `app` on `sock` in a task named `name` (the request head bounded by the
        live `[server]` table unless `http` is given)."""
        server = embedded_server(app, lifespan, http or bounded_protocol(self._server))
        self.servers.append(server)
        self.tasks[name] = asyncio.create_task(server.serve(sockets=[sock]), name=name)
        return server

    def configure(self, server: ServerConfig) -> None:
        """Take `server`'s send buffer and connection limit (a reload's): the public socket's
        send buffer, and the limit uvicorn reads for each new connection, which llmd's protocol
        counts requests in progress against (llmd/proxy/connections.py)."""
        if self.public is not None:
            set_send_buffer(self.public, server.send_buffer_bytes)
        if self.proxy is not None:
            self.proxy.config.limit_concurrency = server.max_connections or None

    async def close(self) -> None:
        """Stop accepting: close the listeners and the idle keep-alive connections, and wait
        for the servers to end."""
        for server in self.servers:
            server.should_exit = True
        if self.tasks:
            await asyncio.wait(self.tasks.values())
