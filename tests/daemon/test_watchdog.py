"""The stall watchdog over a daemon's state: a stream whose send to its client waits, or one a
send timeout is ending, is not judged; the same stream waiting on the engine is."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from llmd.config import EngineConfig, load_config
from llmd.daemon.watchdog import Watchdog
from llmd.inflight import Exchange
from llmd.supervisor.state import EnginePhase
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.state import daemon_state


@dataclasses.dataclass
class Restarts:
    """A supervisor as the watchdog sees one: its engine table, and the stalls it was told."""

    engine: EngineConfig
    told: list[str] = dataclasses.field(default_factory=list)
    restarted: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def stalled(self, detail: str) -> bool:
        self.told.append(detail)
        self.restarted.set()
        return True


async def test_only_time_llmd_waits_on_the_engine_is_judged() -> None:
    """An engine with nothing running (its counters unread) and one stream silent for 10 s,
    past its 1 s stall and idle timeouts: held by its client (`send_since`), or cut by the
    send timeout (its task cancelled), it ends nothing and restarts nothing; waiting on the
    engine, it is the engine's stall (the stream ended, the engine restarted)."""
    path = short_tmpdir("llmd-watchdog-") / "llmd.toml"
    path.write_text(sim_config(ensure_tiny_model(), engine={"stall_timeout_s": 1.0}))
    state = daemon_state(load_config(path))
    state.fleet.engines["main"].phase = EnginePhase.SERVING
    supervisor = Restarts(state.config.engine_tables["main"])
    watchdog = Watchdog(state, {"main": supervisor})  # type: ignore[dict-item]
    release = asyncio.Event()
    now = time.monotonic()
    stream = Exchange("held", stream=True, started_at=now - 10, admitted_at=now - 10)
    stream.backend, stream.progress_at, stream.send_since = "main", now - 10, now - 9
    stream.task = asyncio.create_task(release.wait())  # type: ignore[arg-type]
    state.inflight.add(stream)
    watchdog.check(now - 10.5)  # the watch begins
    watchdog.check(now)
    assert stream.abort_error is None and not supervisor.told
    stream.send_since = None  # cut by the send timeout (llmd/proxy/stalls.py)
    stream.task.cancel()
    watchdog.check(now)
    assert stream.abort_error is None and not supervisor.told
    stream.task = asyncio.create_task(release.wait())  # type: ignore[arg-type]
    watchdog.check(now)
    assert stream.abort_error is not None and stream.abort_error.reason == "engine_stalled"
    await asyncio.wait_for(supervisor.restarted.wait(), 5)
    assert len(supervisor.told) == 1 and "no token for 10" in supervisor.told[0]
    release.set()
