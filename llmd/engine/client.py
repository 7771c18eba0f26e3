"""The HTTP client llmd's request path uses to reach one backend: a supervised engine on its
Unix socket, or an upstream at `http(s)://HOST:PORT` or `unix:/path`.

One per backend, one `pool()` (llmd/engine/wire.py: llmd's own HTTP/1.1 client) for every call:
the relay posts through it (the hot path); the validator's engine counter (`/tokenize`), the
upstream probe, model relisting and the metrics scraper `fetch` whole answers. Made on first use
(on the event loop) and closed by `close()`; every request sends `pool_headers()` (the backend's
API key). Connections are kept alive between requests, for at most `KEEPALIVE_S` idle.
"""

from __future__ import annotations

import base64
import contextlib
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from llmd.config import EngineConfig
from llmd.engine.args import engine_auth_headers
from llmd.engine.wire import Answer, Pool

# The host name of requests over a Unix socket (any name does: the socket is the address).
UNIX_BASE = "http://engine"
# How long an idle connection to a backend is kept for the next request: well under the 5 s
# after which vLLM's uvicorn closes an idle one (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vLLM 0.32), so
# that llmd does not send on a connection the engine is closing. A connection that still turns
# out closed by then is replaced (`Pool.post`'s resend).
KEEPALIVE_S = 2.0


class EngineClient:
    """The connection pool to one backend: `target` is a Unix socket path (a Path, or a
    string `unix:/path`) or an `http(s)://HOST:PORT` base URL; `api_key`, when given, is sent
    as `Authorization: Bearer` on every request (`pool_headers()`), as is a supervised
    engine's own key (`configure`)."""

    def __init__(self, target: Path | str, api_key: str | None = None) -> None:
        self.target = target
        self.auth: dict[str, str] = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if isinstance(target, Path) or target.startswith("unix:"):
            self.socket_path: Path | None = Path(str(target).removeprefix("unix:"))
            self.base_url = UNIX_BASE
        else:
            self.socket_path = None
            self.base_url = target.rstrip("/")
        url = urllib.parse.urlsplit(self.base_url)
        self.prefix = url.path if self.socket_path is None else ""  # before each request path
        # A `user:password@` in the URL: Basic auth (RFC 7617), as HTTP clients send it.
        self.url_auth: dict[str, str] = {}
        if url.username is not None:
            pair = f"{url.username}:{url.password or ''}".encode()
            self.url_auth["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._pool: Pool | None = None

    def configure(self, engine: EngineConfig) -> None:
        """Take a supervised engine's table (at start-up, on a reload, before a restart
        applies a new one): the API key the engine asks for (`engine.args --api-key`,
        VLLM_API_KEY)."""
        self.auth = engine_auth_headers(engine)

    def url(self, path: str) -> str:
        """The URL of `path` (e.g. '/v1/completions') on this backend."""
        return self.base_url + path

    def pool_headers(self) -> dict[str, str]:
        """What every request to this backend carries (the pool sends only the headers it is
        given): its API key as Bearer, else the URL's Basic auth when it has a
        `user:password@` (as aiohttp sent it for such a URL)."""
        return {**self.url_auth, **self.auth}

    def pool(self) -> Pool:
        """The relay's kept-alive connections to this backend (made on first use): over its
        Unix socket, or TCP to the URL's host and port, TLS for `https`. `request_path()`
        gives the target to post to, `pool_headers()` the headers to send."""
        if self._pool is None:
            if self.socket_path is not None:
                self._pool = Pool(socket_path=self.socket_path, keepalive_s=KEEPALIVE_S)
            else:
                url = urllib.parse.urlsplit(self.base_url)
                self._pool = Pool(
                    host=url.hostname or "",
                    port=url.port,
                    tls=url.scheme == "https",
                    keepalive_s=KEEPALIVE_S,
                )
        return self._pool

    def request_path(self, path: str) -> str:
        """The request target of `path` on this backend (after the URL's own path, if any)."""
        return self.prefix + path

    async def fetch(
        self,
        method: str,
        path: str,
        *,
        timeout_s: float,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """`method` `path` on this backend (after the URL's path), with `pool_headers()` and
        `headers`, its whole answer within `timeout_s` seconds (`Pool.fetch`). Raises
        ConnectFailed, ConnectionLost (both OSErrors), TimeoutError."""
        sent = {**self.pool_headers(), **(headers or {})}
        return await self.pool().fetch(
            method, self.request_path(path), body, sent, timeout_s=timeout_s
        )

    async def close(self) -> None:
        """Close the pool's idle connections (a later `pool()` makes a new one)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """The pool for the body of the `async with`, closed after it."""
        try:
            self.pool()
            yield
        finally:
            await self.close()
