"""A fixed-length answer's head held back until its body, so the two go out in one write.

uvicorn 0.55's `RequestResponseCycle.send` writes a response's head at `http.response.start`
and its body at `http.response.body`: two writes (two syscalls, two segments) for a
non-streamed answer whose body is already in hand (issue 37 item 3: 4.5 against 2.5 µs of CPU
for a head and 300 bytes on loopback). llmd's cycle (`EarlyAnswerCycle`) gives uvicorn's
`send` a `HeldHead` in place of its transport for the start; when the head says
`content-length` (not a stream, not a HEAD request), the head waits there for the body's
first write. A stream's head goes out at its start, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

# A body up to this long goes in one write with its head (copied once after it); a longer one
# goes in a write of its own after the head, as uvicorn writes it: copying a large body (an
# embeddings answer of megabytes) would cost more than the write it saves.
JOIN_MAX_BYTES = 64 * 1024


class HeldHead:
    """`transport`, its first write (a response's head) held: the next write sends the head
    and its own bytes in one `transport.write` (up to `JOIN_MAX_BYTES` of them; past it, the
    head and then the bytes); `flush()` (or `close()`) writes the head alone.
    Any other attribute is the transport's."""

    __slots__ = ("head", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.head: bytes | None = None  # None: nothing held yet

    def write(self, data: bytes) -> None:
        head = self.head
        if head is None:
            self.head = data
            return
        self.head = b""
        if head and len(data) <= JOIN_MAX_BYTES:
            self.transport.write(head + data)
            return
        if head:
            self.transport.write(head)
        self.transport.write(data)

    def flush(self) -> None:
        """Write the head, if it is still held."""
        head, self.head = self.head, b""
        if head:
            self.transport.write(head)

    def close(self) -> None:
        """Close the transport, after the head (an answer that ended without its body)."""
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
