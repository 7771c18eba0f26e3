"""A 429's Retry-After comes from the release rate of what the request waits on (its tenant's
slots), not from how fast llmd releases requests overall: through a real `llmd serve`."""

from __future__ import annotations

import asyncio

import httpx

from llmd.admission.tenants import hash_key
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until

SLOW, FAST = "key-slow", "key-fast"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_rate_limited_retry_after_follows_the_tenants_release_rate() -> None:
    """'slow' runs one request at a time (each held 1.5 s by the engine) and may queue one;
    'fast' has 40 quick requests released meanwhile. A third 'slow' request waiting behind a
    running and a queued one is told to come back after two of its tenant's releases (at
    most one per 1.5 s: Retry-After >= 2 s), not after two of llmd's (fractions of a second)."""
    workdir = short_tmpdir("llmd-retry-")
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.slow]\nkeys = ["{hash_key(SLOW)}"]\nmax_concurrency = 1\nmax_queued = 1\n'
        f'[tenants.fast]\nkeys = ["{hash_key(FAST)}"]\n'
    )
    llmd = LlmdProcess.start(
        sim_config(ensure_tiny_model(), admission={"tenants_file": str(tenants)}), workdir
    )
    held = {**CHAT, "sim_fault": "delay:1.5"}
    try:
        llmd.wait_ready(timeout_s=30)
        async with httpx.AsyncClient(base_url=llmd.base_url, timeout=60) as client:

            def post(key: str, body: dict[str, object]) -> asyncio.Task[httpx.Response]:
                return asyncio.create_task(
                    client.post("/v1/chat/completions", json=body, headers=auth(key))
                )

            def slow_queued() -> int:
                rows = llmd.admin_status()["tenants"]
                return next((t["queued"] for t in rows if t["name"] == "slow"), 0)

            slow = [post(SLOW, held), post(SLOW, held)]  # one runs, one waits its turn
            assert await until(lambda: slow_queued() == 1, timeout_s=10)
            fast = await asyncio.gather(*(post(FAST, CHAT) for _ in range(40)))
            assert {a.status_code for a in fast} == {200}
            assert await until(lambda: slow_queued() == 0, timeout_s=10)  # the second runs
            third = post(SLOW, held)  # waits behind the second
            assert await until(lambda: slow_queued() == 1, timeout_s=10)
            refused = await client.post("/v1/chat/completions", json=CHAT, headers=auth(SLOW))
            answers = await asyncio.gather(*slow, third)
    finally:
        llmd.stop()
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 2
    assert [a.status_code for a in answers] == [200] * 3
