"""Admission through a real `llmd serve` on the simulator: 401, 429 and 503 with Retry-After,
cancellation while queued (the engine never sees the request), and x-llmd-queue-ms."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.engine_metrics import engine_gauge
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import engine_held, until

LIMITED, FREE = "key-limited", "key-free"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
HANG = {**CHAT, "sim_fault": "hang"}


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd with one engine slot, two tenants ('limited': 1 running + 1 queued), and an
    interactive queue of 2 requests that times out after 1 s."""
    workdir = short_tmpdir("llmd-adm-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.limited]\nkeys = ["{hash_key(LIMITED)}"]\nmax_concurrency = 1\n'
        f'max_queued = 1\ndefault_class = "interactive"\n'
        f'[tenants.free]\nkeys = ["{hash_key(FREE)}"]\ndefault_class = "interactive"\n'
    )
    config = sim_config(
        ensure_tiny_model(),
        admission={
            "tenants_file": str(tenants),
            "max_in_flight": 1,
            "batch_reserve": 0,
            "interactive": {"queue_size": 2, "queue_timeout_s": 1.0, "aging_s": 0.0},
        },
    )
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def auth(key: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **headers}


def engine_requests_seen(socket: Path) -> float:
    """Prompt tokens the simulator has started generating for (vllm:prompt_tokens_total): a
    request that reached the engine and was scheduled adds its prompt. (Aborted requests are
    not in request_success_total, as in vLLM 0.32, so that counter cannot tell.)"""
    return engine_gauge(socket, "vllm:prompt_tokens_total")


def waited_s(llmd: LlmdProcess, cls: str) -> float:
    """How long the oldest request in llmd's queue of class `cls` has waited (0: none)."""
    queue = next(q for q in llmd.admin_status()["queues"] if q["name"] == cls)
    return float(queue["oldest_wait_s"] or 0)


def held(
    client: httpx.AsyncClient, llmd: LlmdProcess, key: str = FREE
) -> contextlib.AbstractAsyncContextManager[None]:
    """A request that hangs in the engine, holding llmd's one slot until the block ends (and
    llmd holds no request any more)."""
    return engine_held(client, llmd, HANG, auth(key))


def test_missing_or_bad_key_is_401(llmd: LlmdProcess) -> None:
    """With keys configured, no key or an unknown key is 401 invalid_api_key; a good key works."""
    url = llmd.base_url + "/v1/chat/completions"
    for headers in ({}, auth("wrong")):
        answer = httpx.post(url, json=CHAT, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "invalid_api_key"
    ok = httpx.post(url, json=CHAT, headers=auth(FREE), timeout=10)
    assert ok.status_code == 200 and "x-llmd-queue-ms" in ok.headers


async def test_tenant_over_its_queued_limit_is_429_rate_limited(llmd: LlmdProcess) -> None:
    """'limited' has one running and one queued: a third is 429 rate_limited + Retry-After."""
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client:
        async with held(client, llmd, LIMITED):
            queued = asyncio.create_task(
                client.post("/v1/chat/completions", json=CHAT, headers=auth(LIMITED))
            )
            assert await until(lambda: llmd.queue_depth("interactive") == 1, timeout_s=10)
            third = await client.post("/v1/chat/completions", json=CHAT, headers=auth(LIMITED))
            assert third.status_code == 429
            assert third.json()["error"]["code"] == "rate_limited"
            assert int(third.headers["retry-after"]) >= 1
            assert await until(lambda: waited_s(llmd, "interactive") >= 0.1, timeout_s=10)
        answer = await queued  # ran once the slot was free
        assert answer.status_code == 200
        assert int(answer.headers["x-llmd-queue-ms"]) >= 50


async def test_full_class_queue_is_429_queue_full(llmd: LlmdProcess) -> None:
    """With the interactive queue holding its 2 requests, the next is 429 queue_full."""
    client = httpx.AsyncClient(base_url=llmd.base_url, timeout=30)
    async with client, held(client, llmd):
        waiting = [
            asyncio.create_task(client.post("/v1/chat/completions", json=CHAT, headers=auth(FREE)))
            for _ in range(2)
        ]
        assert await until(lambda: llmd.queue_depth("interactive") == 2, timeout_s=10)
        over = await client.post("/v1/chat/completions", json=CHAT, headers=auth(FREE))
        assert over.status_code == 429, over.text
        assert over.json()["error"]["code"] == "queue_full"
        assert int(over.headers["retry-after"]) >= 1
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_queue_timeout_and_deadline_are_503_with_retry_after(llmd: LlmdProcess) -> None:
    """Waiting past the class timeout (1 s) or x-llmd-deadline-ms is 503 queue_timeout."""
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client:
        async with held(client, llmd):
            loop = asyncio.get_running_loop()
            started = loop.time()
            timed_out = await client.post("/v1/chat/completions", json=CHAT, headers=auth(FREE))
            assert 0.9 <= loop.time() - started < 8
            headers = auth(FREE, **{"x-llmd-deadline-ms": "200", "x-llmd-priority": "batch"})
            started = loop.time()
            deadline = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
            assert loop.time() - started < 5  # batch's own timeout is 600 s
        for answer in (timed_out, deadline):
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "queue_timeout"
            assert int(answer.headers["retry-after"]) >= 1
        assert "deadline" in deadline.json()["error"]["message"]


async def test_client_leaving_while_queued_never_reaches_the_engine(llmd: LlmdProcess) -> None:
    """A queued request whose client leaves is dropped at once: when the slot frees up, the
    engine never receives it (no prompt is prefilled: the holder hangs before its prefill)."""
    before = engine_requests_seen(llmd.engine_socket)
    client = httpx.AsyncClient(base_url=llmd.base_url, timeout=30)
    async with client, held(client, llmd):
        body = {**CHAT, "stream": True, "max_tokens": 50}
        leaver = asyncio.create_task(
            client.post("/v1/chat/completions", json=body, headers=auth(FREE))
        )
        assert await until(lambda: llmd.queue_depth("interactive") == 1, timeout_s=10)
        leaver.cancel()
        await asyncio.gather(leaver, return_exceptions=True)
        assert await until(lambda: llmd.queue_depth("interactive") == 0, timeout_s=10)
    # engine_held has waited until llmd holds no request: the slot was free, so a request still
    # queued would have run (and been counted by the engine) before that.
    assert engine_requests_seen(llmd.engine_socket) - before == 0


async def test_drain_can_turn_the_queue_away(llmd: LlmdProcess) -> None:
    """`POST /drain {"queued": "reject"}`: a request waiting in llmd's queue is answered 503
    draining with Retry-After at once; resume admits again."""
    admin = httpx.AsyncHTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    async with (
        httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client,
        httpx.AsyncClient(transport=admin, base_url="http://llmd") as control,
        held(client, llmd),
    ):
        normal = auth(FREE, **{"x-llmd-priority": "normal"})
        queued = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT, headers=normal))
        assert await until(lambda: llmd.queue_depth("normal") == 1, timeout_s=10)
        assert not queued.done()
        drained = await control.post("/drain", json={"queued": "reject"})
        answer = await asyncio.wait_for(queued, timeout=5)
        await control.post("/resume")
    assert drained.status_code == 200
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "draining"
    assert int(answer.headers["retry-after"]) >= 1
    after = httpx.post(
        llmd.base_url + "/v1/chat/completions", json=CHAT, headers=auth(FREE), timeout=30
    )
    assert after.status_code == 200
