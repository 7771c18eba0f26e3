"""Rejections are rejections: every code llmd refuses a request with before it reaches the
engine is counted in llmd_rejections_total{reason}, in the status's rejections (not its
errors) and logged with outcome `rejected`, through a real `llmd serve` on the simulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.accounting import Tally, assert_counted_as_rejection, tenant_with_metrics
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import engine_held, until

LIMITED, FREE = "key-limited", "key-free"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
BODY_BUDGET = 96 * 1024


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """One engine seat; 'limited' may have 1 running and 1 queued; the interactive queue holds
    2 requests, the normal one keeps them at most 1 s; bodies of waiting requests may hold
    96 KiB."""
    workdir = short_tmpdir("llmd-rej-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.limited]\nkeys = ["{hash_key(LIMITED)}"]\nmax_concurrency = 1\n'
        f'max_queued = 1\ndefault_class = "interactive"\n'
        f'[tenants.free]\nkeys = ["{hash_key(FREE)}"]\ndefault_class = "interactive"\n'
        + tenant_with_metrics()
    )
    config = sim_config(
        ensure_tiny_model(),
        admission={
            "tenants_file": str(tenants),
            "max_in_flight": 1,
            "batch_reserve": 0,
            "max_queued_bytes": BODY_BUDGET,
            "interactive": {"queue_size": 2, "queue_timeout_s": 60.0, "aging_s": 0.0},
            "normal": {"queue_size": 8, "queue_timeout_s": 1.0, "aging_s": 5.0},
        },
    )
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def headers(key: str, request_id: str | None = None, **more: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "x-request-id": request_id or uuid.uuid4().hex,
            **more}  # fmt: skip


@pytest.fixture
async def client(llmd: LlmdProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client:
        yield client


def seat_held(
    client: httpx.AsyncClient, llmd: LlmdProcess, key: str = FREE
) -> contextlib.AbstractAsyncContextManager[None]:
    """A request that hangs in the engine holds llmd's one seat until the block ends."""
    return engine_held(client, llmd, {**CHAT, "sim_fault": "hang"}, headers(key))


async def queued(
    client: httpx.AsyncClient, llmd: LlmdProcess, key: str, cls: str, body: dict[str, Any] = CHAT
) -> asyncio.Task[httpx.Response]:
    """A request of class `cls` waiting in llmd's queue (the seat being held)."""
    before = llmd.queue_depth(cls)
    sent = headers(key, **{"x-llmd-priority": cls})
    task = asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=sent))
    assert await until(lambda: llmd.queue_depth(cls) > before, timeout_s=10)
    return task


async def settle(*tasks: asyncio.Task[httpx.Response]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def check(llmd: LlmdProcess, before: Tally, answer: httpx.Response, code: str, status: int) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    if status in (429, 503):
        assert int(answer.headers["retry-after"]) >= 1
    request_id = answer.headers["x-request-id"]
    assert_counted_as_rejection(llmd, before, request_id, code, status)


async def test_rate_limited_is_a_rejection(llmd: LlmdProcess, client: httpx.AsyncClient) -> None:
    """A tenant over its max_queued: 429 rate_limited, counted as a rejection."""
    async with seat_held(client, llmd, LIMITED):
        waiting = await queued(client, llmd, LIMITED, "interactive")
        before = Tally.take(llmd)
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=headers(LIMITED))
        check(llmd, before, answer, "rate_limited", 429)
        await settle(waiting)


async def test_queue_full_is_a_rejection(llmd: LlmdProcess, client: httpx.AsyncClient) -> None:
    """A full class queue: 429 queue_full, counted as a rejection."""
    async with seat_held(client, llmd):
        waiting = [await queued(client, llmd, FREE, "interactive") for _ in range(2)]
        before = Tally.take(llmd)
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=headers(FREE))
        check(llmd, before, answer, "queue_full", 429)
        await settle(*waiting)


async def test_queue_timeout_is_a_rejection(llmd: LlmdProcess, client: httpx.AsyncClient) -> None:
    """Waiting past the class's queue_timeout_s: 503 queue_timeout, counted as a rejection
    (and a timeout)."""
    async with seat_held(client, llmd):
        before = Tally.take(llmd)
        normal = headers(FREE, **{"x-llmd-priority": "normal"})
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=normal)
        check(llmd, before, answer, "queue_timeout", 503)
        timeouts = llmd.admin_status()["counts"]["timeouts"]
        assert timeouts == before.status["counts"]["timeouts"] + 1


async def test_a_passed_deadline_is_a_rejection(
    llmd: LlmdProcess, client: httpx.AsyncClient
) -> None:
    """x-llmd-deadline-ms passing while queued: 503 queue_timeout, counted as a rejection."""
    async with seat_held(client, llmd):
        before = Tally.take(llmd)
        late = headers(FREE, **{"x-llmd-deadline-ms": "200", "x-llmd-priority": "batch"})
        answer = await client.post("/v1/chat/completions", json=CHAT, headers=late)
        check(llmd, before, answer, "queue_timeout", 503)
        assert "deadline" in answer.json()["error"]["message"]


def test_a_bad_deadline_header_is_a_rejection(llmd: LlmdProcess) -> None:
    """A malformed x-llmd-deadline-ms: 400 invalid_request, counted as a rejection."""
    before = Tally.take(llmd)
    bad = headers(FREE, **{"x-llmd-deadline-ms": "soon"})
    answer = httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT, headers=bad, timeout=30)
    check(llmd, before, answer, "invalid_request", 400)


async def test_a_queue_turned_away_by_a_drain_is_a_rejection(
    llmd: LlmdProcess, client: httpx.AsyncClient
) -> None:
    """`drain --reject-queued` answers a queued request 503 draining: a rejection."""
    admin = httpx.AsyncHTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    async with (
        httpx.AsyncClient(transport=admin, base_url="http://llmd", timeout=30) as control,
        seat_held(client, llmd),
    ):
        waiting = await queued(client, llmd, FREE, "interactive")
        before = Tally.take(llmd)
        try:
            assert (await control.post("/drain", json={"queued": "reject"})).status_code == 200
            answer = await asyncio.wait_for(waiting, timeout=10)
        finally:
            await control.post("/resume")
        check(llmd, before, answer, "draining", 503)


async def test_the_body_budget_is_a_rejection(llmd: LlmdProcess, client: httpx.AsyncClient) -> None:
    """Waiting requests holding 60 KiB of a 96 KiB budget: another 60 KiB request is 429
    queue_full once its bytes would pass the budget, counted as a rejection; a small one still
    queues."""
    big = {**CHAT, "metadata_blob": "x" * 60_000}  # passes through to the engine untouched
    async with seat_held(client, llmd):
        waiting = await queued(client, llmd, FREE, "interactive", big)
        before = Tally.take(llmd)
        answer = await asyncio.wait_for(
            client.post("/v1/chat/completions", json=big, headers=headers(FREE)), timeout=10
        )
        check(llmd, before, answer, "queue_full", 429)
        small = await queued(client, llmd, FREE, "interactive")
        await settle(waiting, small)


def test_too_many_sequences_is_a_rejection(llmd: LlmdProcess) -> None:
    """n over validation.max_n (16): 400 invalid_request naming n, counted as a rejection."""
    before = Tally.take(llmd)
    answer = httpx.post(
        llmd.base_url + "/v1/chat/completions",
        json={**CHAT, "n": 17},
        headers=headers(FREE),
        timeout=30,
    )
    check(llmd, before, answer, "invalid_request", 400)
    assert answer.json()["error"]["param"] == "n"


def test_huge_integers_are_refused_and_the_queue_serves_on(llmd: LlmdProcess) -> None:
    """n or max_tokens past a float's range (the fuzz found n = 10**400 reaching the scheduler's
    deficit arithmetic as a 500 that poisoned the queue): each is a 400 naming its field, and a
    plain request right after is served."""
    for field in ("n", "max_tokens"):
        answer = httpx.post(
            llmd.base_url + "/v1/chat/completions",
            content=json.dumps({**CHAT, field: 10**400}),
            headers={**headers(FREE), "content-type": "application/json"},
            timeout=30,
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == field
    served = httpx.post(
        llmd.base_url + "/v1/chat/completions", json=CHAT, headers=headers(FREE), timeout=30
    )
    assert served.status_code == 200, served.text
