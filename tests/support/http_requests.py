"""Reading an HTTP/1.1 request with a Content-Length body off an asyncio stream: what the small
backends of the relay client's tests and of scripts/bench_wire.py do before they answer."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The next request on `reader`, head and body (its Content-Length). Raises
    asyncio.IncompleteReadError when the peer closes first."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await reader.readexactly(length)
