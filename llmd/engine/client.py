"""The one HTTP client llmd's request path uses to reach the engine on its Unix socket.

Opened and closed by the proxy app's lifespan; the relay and the validator's engine counter
(`/tokenize`) take their session from it, and send its `auth` headers (the engine's API key).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from llmd.config import EngineConfig
from llmd.engine.args import engine_auth_headers


class EngineClient:
    """An aiohttp session on the engine socket at `socket_path`, open between `open()` and its
    end; `session()` raises RuntimeError outside it. `auth` holds the headers that authenticate
    llmd to the engine (`configure`)."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.auth: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None

    def configure(self, engine: EngineConfig) -> None:
        """Take the engine table (at start-up, on a reload, before a restart applies a new
        one): the API key the engine asks for (`engine.args --api-key`, VLLM_API_KEY)."""
        self.auth = engine_auth_headers(engine)

    def session(self) -> aiohttp.ClientSession:
        """The open session. Raises RuntimeError when the client is not open."""
        if self._session is None:
            raise RuntimeError("the engine client is not open (outside the proxy's lifespan)")
        return self._session

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Open the session for the body of the `async with`."""
        # One connection per request (force_close): a Unix-socket connect costs microseconds,
        # and a pooled keep-alive connection that the engine's uvicorn has just timed out fails
        # the next request with "Can not write request body" (seen here under load).
        connector = aiohttp.UnixConnector(path=str(self.socket_path), limit=0, force_close=True)
        # No total timeout: a long generation is legitimate; drain and disconnects end requests.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        ) as session:
            self._session = session
            try:
                yield
            finally:
                self._session = None
