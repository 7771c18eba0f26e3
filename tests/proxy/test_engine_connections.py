"""Connections to the engine: kept alive between requests, closed when the client leaves
mid-stream (what makes vLLM abort the sequence), renewed when the engine had closed a
kept-alive one as the request went out (the stale keep-alive race), and what a client gets when
the engine dies under its request (502) or is gone before it (503)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from llmd.engine.client import EngineClient
from tests.support.fake_engine import ProxyStack
from tests.support.http_requests import read_request, shut_now
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    with ProxyStack.run(model, Path(tmp_path_factory.mktemp("run")), 64) as running:
        yield running


def test_requests_one_after_another_share_one_engine_connection(stack: ProxyStack) -> None:
    """A request whose answer was read to its end leaves its engine connection open for the
    next one (streamed or not)."""
    with httpx.Client(base_url=stack.base_url, timeout=30) as client:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
        streamed = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    first, *others = stack.engine.transports
    assert len(others) == 2 and all(other is first for other in others)
    assert not first.is_closing()


def test_a_client_that_leaves_mid_stream_closes_the_engine_connection(stack: ProxyStack) -> None:
    """The client leaves before its stream's end: llmd closes that engine connection (vLLM
    aborts the sequence when its connection closes) and the next request gets a new one."""
    body = {**CHAT, "stream": True, "hold_tail": True}
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", json=body) as answer:
        assert b"data: " in next(answer.iter_raw())
    (cut,) = stack.engine.transports
    assert wait_for(cut.is_closing, timeout_s=10)
    stack.release_tail()
    assert httpx.post(stack.base_url + "/v1/chat/completions", json=CHAT).status_code == 200
    assert stack.engine.transports[1] is not cut


@contextlib.asynccontextmanager
async def answering(socket: Path) -> AsyncIterator[tuple[list[int], list[asyncio.StreamWriter]]]:
    """An HTTP server on `socket` that answers every request, keeping its connections alive.
    Yields the requests each connection got, in order of connection, and the server's end of
    each connection."""
    requests: list[int] = []
    ends: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mine = len(requests)
        requests.append(0)
        ends.append(writer)
        with contextlib.closing(writer), contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await read_request(reader)  # until the client closes
                requests[mine] += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()

    server = await asyncio.start_unix_server(serve, path=str(socket))
    try:
        yield requests, ends
    finally:
        server.close()
        await server.wait_closed()


async def test_a_kept_alive_connection_the_engine_closed_is_renewed(tmp_path: Path) -> None:
    """The engine closes the kept-alive connection as the second request goes out (its
    keep-alive timed out; llmd's loop has not seen the close): the request is sent on a new
    connection and answered there, once."""
    socket = tmp_path / "e.sock"
    async with answering(socket) as (requests, ends):
        client = EngineClient(socket)
        try:
            response = await client.pool().post("/v1/completions", b"{}", {})
            assert response.status == 200 and await response.read() == b"{}"
            [stale] = client.pool().idle
            shut_now(ends[0])
            response = await client.pool().post("/v1/completions", b"{}", {})
            assert response.status == 200 and await response.read() == b"{}"
            assert stale.closed and client.pool().idle != [stale]
        finally:
            await client.close()
    assert requests == [1, 1]  # the second was refused on the first connection, then sent anew


def test_an_engine_dying_under_a_request_is_502_and_none_to_send_to_is_503() -> None:
    """A request that kills the engine (it went out on the kept-alive connection; the resend on
    a new one is refused) answers 502 `engine_error`: the engine died under it. A request while
    no engine runs (the restart's backoff) answers 503 `engine_unavailable` with Retry-After:
    nothing was sent."""
    sections = {"supervisor": {"backoff_initial_s": 5.0, "backoff_max_s": 5.0}}
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), **sections))
    try:
        llmd.wait_ready(timeout_s=30)
        url = llmd.base_url + "/v1/chat/completions"
        assert httpx.post(url, json=CHAT, timeout=30).status_code == 200  # kept alive
        died = httpx.post(url, json={**CHAT, "sim_fault": "crash"}, timeout=30)
        assert died.status_code == 502, died.text
        assert died.json()["error"]["code"] == "engine_error"
        down = lambda: llmd.admin_status()["engine"]["state"] != "serving"  # noqa: E731
        assert wait_for(down, timeout_s=10)
        none = httpx.post(url, json=CHAT, timeout=30)
        assert none.status_code == 503, none.text
        assert none.json()["error"]["code"] == "engine_unavailable"
        assert int(none.headers["retry-after"]) >= 1
    finally:
        llmd.stop()
