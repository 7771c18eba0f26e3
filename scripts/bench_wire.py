"""The relay's engine side alone: CPU per streamed event read from an engine's socket, aiohttp's
client (what the relay used) against llmd's own (llmd/engine/wire.py), by `readany` and by the
sink the stream's writer uses (`Reply.wait`, no task switch per chunk).

A firehose on a Unix socket (a child process of this script) answers each POST with `--events`
SSE events of vLLM's size, one HTTP chunk each, a write per event and one event per stream per
turn of its loop. This process reads `--streams` such answers at once, closed loop, for
`--seconds` per variant, and counts its own CPU time (user + system) per event received. The
variants run in an order rotated by round; the figures are the median (min-max) over rounds.
Light (a few seconds of CPU per variant); the figures move with the machine's load, the ratios
between variants of one round less.

    .venv/bin/python scripts/bench_wire.py [--rounds 3] [--streams 64] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import uvloop  # noqa: E402

from llmd.engine.connection import Reply  # noqa: E402
from llmd.engine.wire import Pool  # noqa: E402
from tests.support.http_requests import read_request  # noqa: E402

EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny",'
    b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]}\n\n'
)


async def firehose(socket: str, events: int) -> None:
    """Answer every POST on `socket` with `events` chunked SSE events, one per loop turn."""
    chunk = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for _ in range(events):
                    writer.write(chunk)
                    await writer.drain()
                    await asyncio.sleep(0)
                writer.write(b"0\r\n\r\n")
        writer.close()

    server = await asyncio.start_unix_server(serve, path=socket, backlog=1024)
    async with server:
        await server.serve_forever()


Reader = Callable[[], Awaitable[int]]  # one request; returns the body bytes it read


def aiohttp_reader(socket: str) -> tuple[Reader, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=socket, limit=0), auto_decompress=False
    )

    async def one() -> int:
        chunks = 0
        async with session.post("http://engine/v1/completions", data=b"{}") as response:
            while chunk := await response.content.readany():
                chunks += len(chunk)
        return chunks

    return one, session.close


def wire_reader(socket: str, *, sink: bool) -> tuple[Reader, Callable[[], Awaitable[None]]]:
    pool = Pool(socket_path=Path(socket))

    async def one() -> int:
        reply = await pool.post("/v1/completions", b"{}", {"content-type": "application/json"})
        try:
            return await (_by_sink(reply) if sink else _by_readany(reply))
        finally:
            reply.close()

    async def close() -> None:
        pool.close()

    return one, close


async def _by_readany(reply: Reply) -> int:
    chunks = 0
    while chunk := await reply.readany():
        chunks += len(chunk)
    return chunks


async def _by_sink(reply: Reply) -> int:
    count = [0]

    def take(chunk: bytes) -> bool:
        count[0] += len(chunk)
        return True

    while True:
        await reply.wait(take)
        chunk = await reply.readany()
        if not chunk:
            return count[0]
        count[0] += len(chunk)


VARIANTS = {
    "aiohttp readany": lambda socket: aiohttp_reader(socket),
    "wire readany": lambda socket: wire_reader(socket, sink=False),
    "wire sink": lambda socket: wire_reader(socket, sink=True),
}


async def measure(socket: str, variant: str, streams: int, seconds: float) -> float:
    """CPU µs of this process per event read (body bytes / an event's size), `streams`
    closed-loop readers for `seconds`."""
    one, close = VARIANTS[variant](socket)
    total = [0]
    stop = time.monotonic() + seconds

    async def loop() -> None:
        while time.monotonic() < stop:
            read = await one()
            total[0] += read

    await asyncio.gather(*(one() for _ in range(streams)))  # warm: connections made
    cpu = time.process_time()
    total[0] = 0
    await asyncio.gather(*(loop() for _ in range(streams)))
    used = time.process_time() - cpu
    await close()
    return used / (total[0] / len(EVENT)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        uvloop.run(firehose(args.serve, args.events))
        return
    socket = os.path.join(tempfile.mkdtemp(prefix="bench-wire-"), "e.sock")
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", socket, "--events", str(args.events)]
    )
    try:
        while not os.path.exists(socket):
            time.sleep(0.05)
        names = list(VARIANTS)
        results: dict[str, list[float]] = {name: [] for name in names}
        for index in range(args.rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            for name in order:
                value = uvloop.run(measure(socket, name, args.streams, args.seconds))
                results[name].append(value)
                print(f"round {index + 1} {name}: {value:.2f} µs CPU per event", flush=True)
        for name, values in results.items():
            median = statistics.median(values)
            print(f"{name}: {median:.2f} µs ({min(values):.2f}-{max(values):.2f})")
    finally:
        child.terminate()
        child.wait()


if __name__ == "__main__":
    main()
