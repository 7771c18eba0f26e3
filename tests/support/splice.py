"""A bare byte splice for the relay benchmarks: the floor any relay process is measured
against (scripts/bench_relay.py, scripts/bench_ceiling.py)."""

from __future__ import annotations

import asyncio


async def splice_server(listen_port: int, upstream: str, backlog: int = 100) -> None:
    """Accept TCP connections on 127.0.0.1:`listen_port` (`backlog` pending at most) and pipe
    bytes both ways to the Unix socket `upstream`, until cancelled."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_unix_connection(upstream)
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=backlog)
    async with server:
        await server.serve_forever()
