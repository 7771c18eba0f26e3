"""The model names a request may use: every name the engine lists, read again (at most once a
second, one read for concurrent requests) when a request names one not known yet."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from llmd.errors import ModelNotFound
from llmd.supervisor.state import EngineState, model_ids
from llmd.validation.models import REFRESH_S, ServedModels


@dataclasses.dataclass
class Listing:
    """A fake engine's /v1/models: the names it lists, the reads, the headers of the last."""

    names: list[str]
    reads: int = 0
    authorization: str | None = None


Engine = tuple[aiohttp.ClientSession, Listing]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
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
    socket = str(tmp_path / "e.sock")
    await web.UnixSite(runner, socket).start()
    session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket))
    yield session, listing
    await session.close()
    await runner.cleanup()


def served(session: aiohttp.ClientSession, ready_at: float | None = 1.0) -> ServedModels:
    state = EngineState(served_models=("a", "b"), ready_at=ready_at)
    models = ServedModels(state, lambda: session, lambda: {"Authorization": "Bearer k"})
    models.fallback = "configured"
    return models


def test_model_ids_reads_an_openai_listing() -> None:
    """The ids of a model list, in order; junk gives none."""
    assert model_ids({"data": [{"id": "a"}, {"id": "x", "parent": "a"}, {"no": 1}]}) == ("a", "x")
    assert model_ids({"data": "nope"}) == () and model_ids(None) == ()


async def test_known_names_pass_without_asking_the_engine(engine: Engine) -> None:
    """Names the supervisor read at boot pass at once; before any boot, the configured one."""
    session, listing = engine
    models = served(session)
    await models.check("a")
    await models.check("b")
    assert listing.reads == 0
    before_boot = ServedModels(EngineState(), lambda: session)
    before_boot.fallback = "configured"
    assert before_boot.names() == ("configured",)


async def test_an_unknown_name_reads_the_list_again_once(engine: Engine) -> None:
    """An adapter loaded after boot is found by reading /v1/models again (with llmd's key);
    ten concurrent misses share one read, and a name still missing is a 404 listing the names."""
    session, listing = engine
    models = served(session)
    listing.names.append("lora-x")
    await asyncio.gather(*(models.check("lora-x") for _ in range(10)))
    assert listing.reads == 1 and listing.authorization == "Bearer k"
    assert models.names() == ("a", "b", "lora-x")
    with pytest.raises(ModelNotFound) as caught:
        await models.check("nope")
    assert "a, b, lora-x" in caught.value.message and caught.value.param == "model"


async def test_misses_read_at_most_once_per_refresh_interval(engine: Engine) -> None:
    """A flood of unknown names reads the engine's list at most once per REFRESH_S."""
    session, listing = engine
    models = served(session)
    started = time.monotonic()
    for _ in range(50):
        with pytest.raises(ModelNotFound):
            await models.check("nope")
    elapsed = time.monotonic() - started
    assert 1 <= listing.reads <= 1 + elapsed / REFRESH_S


async def test_a_new_boot_starts_from_its_own_list(engine: Engine) -> None:
    """What was read for one boot is dropped when the engine boots again with other names."""
    session, listing = engine
    models = served(session)
    listing.names.append("lora-x")
    await models.check("lora-x")
    models.engine.ready_at = 2.0
    models.engine.served_models = ("c",)
    assert models.names() == ("c",)
