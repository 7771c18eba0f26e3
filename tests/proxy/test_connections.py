"""The public listener's connection limit (server.max_connections): past it, llmd's own 503
`too_many_connections` with Retry-After (not uvicorn's plain-text one), counted as a
rejection; the probes are answered past it; a reload applies a new limit to the connections
that follow. The tests share one llmd (limit 3) and read its counters as differences."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.accounting import Tally
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}


def config(max_connections: int) -> str:
    return sim_config(ensure_tiny_model(), server={"max_connections": max_connections})


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd with max_connections = 3, for the module's tests: a test that reloads another
    limit reloads 3 back before it ends."""
    workdir = short_tmpdir("llmd-conn-")
    with LlmdProcess.running(config(3), workdir, timeout_s=30) as process:
        yield process


def reload_limit(llmd: LlmdProcess, max_connections: int) -> None:
    """Write a config of `max_connections` and reload it through the admin API."""
    (llmd.runtime_dir.parent / "llmd.toml").write_text(config(max_connections))
    with llmd.admin() as admin:
        assert admin.post("/reload").status_code == 200


@contextlib.asynccontextmanager
async def connections_held(llmd: LlmdProcess, count: int) -> AsyncIterator[None]:
    """`count` connections, each with a stream that hangs in the engine, until the block ends."""
    idle = lambda: not llmd.admin_status()["sequences"]  # noqa: E731
    assert await until(idle, timeout_s=10)  # no stream of an earlier test is held still
    clients = [httpx.AsyncClient(base_url=llmd.base_url, timeout=30) for _ in range(count)]
    body = {**CHAT, "stream": True, "sim_fault": "hang"}

    async def hang(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", "/v1/chat/completions", json=body):
            await asyncio.Event().wait()

    tasks = [asyncio.create_task(hang(client)) for client in clients]
    try:
        live = lambda: len(llmd.admin_status()["sequences"]) == count  # noqa: E731
        assert await until(live, timeout_s=10)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            await client.aclose()


async def test_past_the_limit_llmd_answers_503_with_retry_after_and_a_reload_raises_it(
    llmd: LlmdProcess,
) -> None:
    """max_connections = 3 with three streams open: a fourth connection gets 503
    too_many_connections, OpenAI-shaped (Anthropic's on /v1/messages), with Retry-After,
    counted in llmd_rejections_total;
    after a reload to 8 the next one is served."""
    try:
        before = Tally.take(llmd)
        async with connections_held(llmd, 3):
            async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as fourth:
                refused = await fourth.post("/v1/chat/completions", json=CHAT)
                message = {"model": "tiny", "max_tokens": 2, "messages": CHAT["messages"]}
                anthropic = await fourth.post("/v1/messages", json=message)
            (llmd.runtime_dir.parent / "llmd.toml").write_text(config(8))
            transport = httpx.AsyncHTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
            async with httpx.AsyncClient(transport=transport, base_url="http://llmd") as admin:
                assert (await admin.post("/reload")).status_code == 200
            async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as fifth:
                served = await fifth.post("/v1/chat/completions", json=CHAT)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "too_many_connections"
        assert int(refused.headers["retry-after"]) >= 1
        assert anthropic.status_code == 503 and int(anthropic.headers["retry-after"]) >= 1
        assert anthropic.json()["error"]["type"] == "overloaded_error"  # Anthropic's shape
        assert served.status_code == 200, served.text
        after = Tally.take(llmd)
        assert (
            after.rejections("too_many_connections") - before.rejections("too_many_connections")
            == 2
        )
    finally:
        await asyncio.to_thread(reload_limit, llmd, 3)  # the module's limit again


def rejected_by_endpoint(llmd: LlmdProcess) -> dict[str, int]:
    """Requests refused so far by endpoint (`other`: a path of no endpoint), from the status."""
    return {e["name"]: int(e["rejected"]) for e in llmd.admin_status()["endpoints"]}


async def test_probes_are_answered_at_the_limit(llmd: LlmdProcess) -> None:
    """max_connections = 3 with three streams open: GET /health, /ready and /metrics are
    still 200 (a liveness probe must not restart a busy daemon), while a generation request
    gets 503 too_many_connections, counted under its endpoint (`other` on a path of none)."""
    before = rejected_by_endpoint(llmd)
    async with (
        connections_held(llmd, 3),
        httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as probe,
    ):
        probes = [await probe.get(path) for path in ("/health", "/ready", "/metrics")]
        refused = await probe.post("/v1/chat/completions", json=CHAT)
        nowhere = await probe.post("/v1/nowhere", json=CHAT)
    assert [answer.status_code for answer in probes] == [200, 200, 200], probes[0].text
    assert "llmd_requests_total" in probes[2].text
    assert refused.status_code == nowhere.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "too_many_connections"
    after = rejected_by_endpoint(llmd)
    moved = {name: after[name] - before.get(name, 0) for name in after}
    assert {name: n for name, n in moved.items() if n} == {"chat": 1, "other": 1}


async def test_open_connections_without_a_request_do_not_count(llmd: LlmdProcess) -> None:
    """max_connections = 3 with six connections open and idle (a burst that connected
    together): a request on a seventh is served, and so is one on each idle connection, as long
    as fewer than three are in progress (uvicorn alone refused them all: it counts every open
    connection)."""
    writers: list[asyncio.StreamWriter] = []
    try:
        host, port = llmd.base_url.removeprefix("http://").rsplit(":", 1)
        streams = [await asyncio.open_connection(host, int(port)) for _ in range(6)]
        writers = [writer for _, writer in streams]
        assert await until(lambda: _open_connections(llmd) >= 6, timeout_s=10)
        async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as seventh:
            served = await seventh.post("/v1/chat/completions", json=CHAT)
        assert served.status_code == 200, served.text
        body = json.dumps(CHAT).encode()
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: llmd\r\nconnection: close\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        for reader, writer in streams[:2]:
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), timeout=30)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        for writer in writers:
            writer.close()


def _open_connections(llmd: LlmdProcess) -> int:
    """TCP connections established to llmd's public port (the kernel's count, /proc/net/tcp)."""
    port = int(llmd.base_url.rsplit(":", 1)[1])
    established = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "01" and int(local.split(":")[1], 16) == port:
            established += 1
    return established
