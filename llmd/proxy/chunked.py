"""A streamed answer's body written straight to the client's transport, in chunked framing.

The relay's per-token path: one `transport.write` per chunk, where uvicorn's ASGI `send`
(`RequestResponseCycle.send`, uvicorn 0.54) would build a message, a coroutine and a join.
The connection's protocol (llmd/proxy/protocol.py) puts each request's cycle in its scope
(`CYCLE_KEY`); anything this path does not own goes through the cycle's own `send`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

# Where llmd's HTTP protocol puts the request's uvicorn cycle in the ASGI scope.
CYCLE_KEY = "llmd.cycle"


class ChunkedBody:
    """The body of one response on `cycle`, a chunk at a time (`more_body` True).

    `send(chunk)` writes `chunk` (non-empty bytes) as one HTTP/1.1 chunk (RFC 9112 §7.1) on the
    client's transport and returns None, as uvicorn's `send` would without waiting; when its
    `send` would do anything else (the transport's buffer is full and the send must wait for
    it to drain, the response is not a started chunked one, or it is complete) it returns that
    `send`'s coroutine, not started, for the caller to run. A client gone drops the chunk, as
    uvicorn's `send` does."""

    __slots__ = ("_cycle", "_flow", "_write")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._flow = cycle.flow
        self._write = cycle.transport.write

    def send(self, chunk: bytes) -> Coroutine[Any, Any, None] | None:
        cycle = self._cycle
        if cycle.disconnected:
            return None
        if self._flow.write_paused or not cycle.chunked_encoding or cycle.response_complete:
            return cycle.send({"type": "http.response.body", "body": chunk, "more_body": True})
        self._write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        return None
