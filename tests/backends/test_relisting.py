"""Reading the engines' model lists again for a name no pool holds: one read for concurrent
misses, at most one per REFRESH_S, with the engine's key, only serving engines, and the
daemon told of each engine whose list changed."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from llmd.backends.relisting import REFRESH_S, ModelRelisting
from llmd.engine.client import EngineClient
from llmd.supervisor.state import EnginePhase, EngineState


@dataclasses.dataclass
class Listing:
    """A fake engine's /v1/models: the names it lists, the reads, the headers of the last."""

    names: list[str]
    reads: int = 0
    authorization: str | None = None


@dataclasses.dataclass
class Fake:
    """A relisting over one serving engine `e` on a fake engine, and the changes it reported."""

    relisting: ModelRelisting
    listing: Listing
    state: EngineState
    changed: list[str]


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[Fake]:
    """A fake engine on a Unix socket serving /v1/models from a `Listing`."""
    listing = Listing(["a", "b"])

    async def models(request: web.Request) -> web.Response:
        listing.reads += 1
        listing.authorization = request.headers.get("authorization")
        return web.json_response({"object": "list", "data": [{"id": n} for n in listing.names]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = tmp_path / "e.sock"
    await web.UnixSite(runner, str(socket)).start()
    client = EngineClient(socket, api_key="k")
    state = EngineState(phase=EnginePhase.SERVING, served_models=("a", "b"))
    changed: list[str] = []
    yield Fake(ModelRelisting({"e": state}, {"e": client}, changed.append), listing, state, changed)
    await client.close()
    await runner.cleanup()


async def test_a_new_adapter_is_read_once_for_concurrent_misses(fake: Fake) -> None:
    """Ten concurrent misses share one read (with the engine's key); the engine's names take
    the new list and the daemon is told once."""
    fake.listing.names.append("lora-x")
    await asyncio.gather(*(fake.relisting.relist() for _ in range(10)))
    assert fake.listing.reads == 1 and fake.listing.authorization == "Bearer k"
    assert fake.state.served_models == ("a", "b", "lora-x") and fake.changed == ["e"]


async def test_misses_read_at_most_once_per_refresh_interval(fake: Fake) -> None:
    """A flood of misses reads the list at most once per REFRESH_S; an unchanged list tells
    the daemon nothing."""
    started = time.monotonic()
    for _ in range(50):
        await fake.relisting.relist()
    elapsed = time.monotonic() - started
    assert 1 <= fake.listing.reads <= 1 + elapsed / REFRESH_S
    assert fake.changed == []


async def test_an_engine_not_serving_is_not_asked(fake: Fake) -> None:
    """A booting engine is skipped (its list is read when it becomes ready)."""
    fake.state.phase = EnginePhase.STARTING
    await fake.relisting.relist()
    assert fake.listing.reads == 0
