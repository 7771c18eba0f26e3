"""The simulator's sleep mode: vLLM 0.32's dev-mode endpoints, the wake time, memory figures,
and a request sent while asleep accepted and never processed."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.engine.sim.conftest import SimFactory

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def memory(text: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith("sim:device_memory_bytes "))
    return float(line.split()[1])


async def test_without_dev_mode_the_sleep_routes_are_not_served(make_sim: SimFactory) -> None:
    """Without VLLM_SERVER_DEV_MODE=1, POST /sleep is 404 (vLLM serves it only in dev mode)."""
    sim = await make_sim("--enable-sleep-mode")
    assert (await sim.client.post("/sleep?level=1")).status_code == 404


async def test_sleep_needs_enable_sleep_mode(
    make_sim: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In dev mode without --enable-sleep-mode, /sleep answers 500 as vLLM's worker does."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    sim = await make_sim()
    answer = await sim.client.post("/sleep?level=1")
    assert answer.status_code == 500 and "not enabled" in answer.text


@pytest.mark.parametrize(("level", "factor"), [(1, 1.0), (2, 3.0)])
async def test_sleep_and_wake(
    make_sim: SimFactory, monkeypatch: pytest.MonkeyPatch, level: int, factor: float
) -> None:
    """/sleep puts it to sleep (is_sleeping true, device memory 0); a request sent meanwhile is
    accepted and never answered, even after /wake_up; /wake_up takes the wake time (3x at
    level 2), then new requests run and the memory is back."""
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    sim = await make_sim("--enable-sleep-mode", "--sim-wake-s", "0.2")
    before = memory((await sim.client.get("/metrics")).text)
    assert before > 0
    assert (await sim.client.post(f"/sleep?level={level}")).status_code == 200
    assert (await sim.client.get("/is_sleeping")).json() == {"is_sleeping": True}
    assert memory((await sim.client.get("/metrics")).text) == 0
    assert (await sim.client.get("/health")).status_code == 200
    lost = asyncio.create_task(sim.client.post("/v1/chat/completions", json=CHAT))
    done, _ = await asyncio.wait({lost}, timeout=0.3)
    assert not done  # accepted, not processed
    started = time.monotonic()
    assert (await sim.client.post("/wake_up")).status_code == 200
    assert time.monotonic() - started >= 0.2 * factor
    assert (await sim.client.get("/is_sleeping")).json() == {"is_sleeping": False}
    assert memory((await sim.client.get("/metrics")).text) == before
    answer = await sim.client.post("/v1/chat/completions", json=CHAT)
    assert answer.status_code == 200
    assert not lost.done()  # the one sent while asleep never runs
    lost.cancel()
