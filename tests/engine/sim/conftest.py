"""Fixtures: an in-process simulator on a real Unix socket, and an async client for it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmd.engine.sim.app import build_server, start
from llmd.engine.sim.options import SimOptions, parse_options
from llmd.engine.sim.server import SimServer
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The generated tiny model (its tokenizer is what the simulator uses)."""
    return ensure_tiny_model()


@dataclasses.dataclass
class RunningSim:
    server: SimServer
    client: httpx.AsyncClient
    exits: list[int]


SimFactory = Callable[..., Any]


@pytest.fixture
async def make_sim(tiny_model: Path) -> AsyncIterator[SimFactory]:
    """`await make_sim("--flag", ...)`: a simulator serving on a fresh socket, zero-latency
    unless timing flags are given; process exits are recorded in `.exits`, not performed."""
    started: list[tuple[Any, RunningSim]] = []

    async def factory(*args: str) -> RunningSim:
        socket = short_tmpdir("llmd-simt-") / "engine.sock"
        timing_flags = ("--step-", "--decode-", "--prefill-", "--request-", "--output-")
        timing_given = any(a.startswith(timing_flags) for a in args)
        argv = [
            "--model",
            str(tiny_model),
            "--uds",
            str(socket),
            "--served-model-name",
            "tiny",
            "--max-model-len",
            "1024",
            *([] if timing_given else ["--zero-latency"]),
            *args,
        ]
        options: SimOptions = parse_options(argv)
        server = build_server(options)
        exits: list[int] = []
        server.on_exit = exits.append
        listener = await start(server, options)
        client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(socket)),
            base_url="http://engine",
            timeout=10,
        )
        sim = RunningSim(server=server, client=client, exits=exits)
        started.append((listener, sim))
        return sim

    yield factory
    for listener, sim in started:
        await sim.client.aclose()
        await listener.close()
        await sim.server.engine.close()


@pytest.fixture
async def sim(make_sim: SimFactory) -> RunningSim:
    """A zero-latency simulator with default limits."""
    running: RunningSim = await make_sim()
    return running
