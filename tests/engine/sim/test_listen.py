"""The simulator's uvicorn server wakes once a second while idle, not ten times (an idle
simulator is most of a simulator's life), and still serves and stops."""

from __future__ import annotations

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from llmd.engine.sim.listen import listen
from tests.support.llmd_process import short_tmpdir
from tests.support.ticks import counted_ticks
from tests.support.waiting import until


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("ok")(scope, receive, send)


async def test_an_idle_server_runs_uvicorns_tick_only_at_its_date_refreshes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until the second refresh of the `date` header (uvicorn's `on_tick` at a counter that
    is a multiple of 10), no tick runs between refreshes; the server answers, and closes."""
    ticks = counted_ticks(monkeypatch)
    sock = str(short_tmpdir("sim-listen-") / "s.sock")
    listener = await listen(_app, uds=sock, host="127.0.0.1", port=None)
    try:
        assert await until(lambda: any(counter >= 10 for counter in ticks), timeout_s=30)
        transport = httpx.AsyncHTTPTransport(uds=sock)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            assert (await client.get("/")).text == "ok"
    finally:
        await listener.close()
    assert ticks[:2] == [0, 10]
