"""Reading an HTTP/1.1 request with a Content-Length body off an asyncio stream: what the small
backends of the relay client's tests and of scripts/bench_wire.py do before they answer; and
closing a backend's end of a connection at once."""

from __future__ import annotations

import asyncio
import os
import socket


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The next request on `reader`, head and body (its Content-Length; none without one,
    as a GET has). Raises asyncio.IncompleteReadError when the peer closes first."""
    head = await reader.readuntil(b"\r\n\r\n")
    lengths = (
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    length = next(lengths, 0)
    return head + await reader.readexactly(length)


def shut_now(writer: asyncio.StreamWriter) -> None:
    """Close the backend's end of `writer`'s connection at once, without a turn of the event
    loop (as a backend on another loop or process closes a connection idle past its
    keep-alive, vLLM's uvicorn after 5 s): the client's loop has not seen it yet."""
    with socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno())) as end:
        end.shutdown(socket.SHUT_RDWR)
