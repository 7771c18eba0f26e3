"""An idle kept-alive connection's deadline (llmd/proxy/protocol.py): closed
`server.keepalive_timeout_s` after its last answer, checked by one timer per connection, not
one armed at each answer's end and cancelled at the next request, as uvicorn's. uvicorn with
llmd's protocol in this test's loop, a raw socket as the client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from llmd.config import ServerConfig
from tests.proxy.test_head_timer import REQUEST, answered, timers_counted

KEEPALIVE_S = 0.5
# The idle timers: llmd's `Deadline`, by name, and uvicorn's own callback, armed at each
# answer's end before (the old code: a test of it fails).
IDLE_TIMERS = ("idle", "timeout_keep_alive_handler")


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, list[str]]]:
    """The server's port, and the name of each idle timer llmd's protocol armed."""
    config = ServerConfig(keepalive_timeout_s=KEEPALIVE_S)
    async with timers_counted(monkeypatch, IDLE_TIMERS, config) as served:
        yield served


async def test_kept_alive_requests_share_one_idle_timer(served: tuple[int, list[str]]) -> None:
    """Five requests in a row on one connection arm the idle timer once, where uvicorn armed
    one at each answer's end (five)."""
    port, armed = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(5):
        writer.write(REQUEST)
        assert (await answered(reader)).startswith(b"HTTP/1.1 200")
    assert armed == ["idle"]
    writer.close()
    await writer.wait_closed()


async def test_idle_is_counted_from_the_last_answer(served: tuple[int, list[str]]) -> None:
    """Requests each sent within the keep-alive timeout of the answer before keep the
    connection open past the first answer's deadline; it closes about `keepalive_timeout_s`
    after the last answer, not sooner."""
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):
        writer.write(REQUEST)
        assert (await answered(reader)).startswith(b"HTTP/1.1 200")
        last = time.monotonic()
        await asyncio.sleep(KEEPALIVE_S * 0.6)
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
    waited = time.monotonic() - last
    assert KEEPALIVE_S * 0.9 <= waited <= KEEPALIVE_S + 1.0, waited
    writer.close()
    await writer.wait_closed()


async def test_pipelined_requests_are_each_answered_then_idle(
    served: tuple[int, list[str]],
) -> None:
    """Three requests sent in one write are answered in order (each the next pipelined one
    started at the previous answer's end), and the connection then idles out as usual."""
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST * 3)
    for _ in range(3):
        assert (await answered(reader)).startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    await writer.wait_closed()
