"""The backends at work, in-process over a daemon's state: an engine llmd removes leaves the
main loop's view before its supervisor stops; upstreams join, are replaced and leave with their
probes; an engine serving other names moves to their pools; a pending or deployed engine table
applies through the daemon's `apply`, and a refused one is rolled back."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from llmd.config import Config, EngineConfig, load_config
from llmd.daemon.backends import Backends
from llmd.daemon.reload import with_engine_tables
from llmd.errors import ConfigError
from llmd.state import DaemonState
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.state import daemon_state


@dataclasses.dataclass
class Live:
    """Backends over a daemon state, with what they asked of the daemon: the engine tables
    applied (`apply_tables`) and how often the members changed outside a reload."""

    state: DaemonState
    applied: list[dict[str, EngineConfig]] = dataclasses.field(default_factory=list)
    members_changed: list[None] = dataclasses.field(default_factory=list)
    refuse: bool = False
    backends: Backends = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.backends = Backends(self.state, self.apply_tables, self.members_changed_now)

    def members_changed_now(self) -> None:
        self.members_changed.append(None)

    def apply_tables(self, tables: Mapping[str, EngineConfig]) -> None:
        """What the daemon's `apply` does with engine tables, as far as the backends see: the
        config in use runs them (or a ConfigError, before anything changed)."""
        if self.refuse:
            raise ConfigError("refused on purpose")
        self.state.config = with_engine_tables(self.state.config, tables)
        self.applied.append(dict(tables))


def _load(text: str) -> Config:
    path = short_tmpdir("llmd-backends-") / "llmd.toml"
    path.write_text(text)
    return load_config(path)


def _live(config: Config) -> Live:
    state = daemon_state(config, runtime_dir=short_tmpdir("llmd-backends-run-"))
    state.paths.create()
    return Live(state)


@pytest.fixture
async def engines() -> AsyncIterator[Live]:
    """Backends over one simulator engine `main` (tiny), not started."""
    live = _live(_load(sim_config(ensure_tiny_model())))
    yield live
    await live.backends.stop_engines()
    await live.backends.state.fleet.close()


@pytest.fixture
async def upstreams() -> AsyncIterator[Live]:
    """Backends over upstream `far` alone (nobody listens at its socket), started."""
    missing = short_tmpdir("llmd-far-") / "missing.sock"
    text = multi_sim_config(
        ensure_tiny_model(), {}, upstreams={"far": {"url": f"unix:{missing}", "models": ["far"]}}
    )
    live = _live(_load(text))
    live.backends.start()
    yield live
    probes = list(live.backends.probes.values())
    for probe in probes:
        probe.cancel()
    if probes:
        await asyncio.wait(probes)
    await live.backends.state.fleet.close()


async def test_an_engine_removed_leaves_the_tasks_before_its_supervisor_stops(
    engines: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A canary added and removed: its supervisor runs as a task the main loop waits on, and
    on removal that task leaves `tasks` before the supervisor's `stop()` begins (so its end is
    never taken for an engine that ended on its own); it leaves the fleet and the pools."""
    backends = engines.backends
    backends.add_engine("extra", backends.state.config.engine_tables["main"])
    assert "extra" in backends.tasks and engines.members_changed == [None]
    task = backends.tasks["extra"]
    supervisor = backends.supervisors["extra"]
    stop = supervisor.stop
    seen_at_stop: list[bool] = []

    async def recording_stop() -> None:
        seen_at_stop.append("extra" in backends.tasks)
        await stop()

    monkeypatch.setattr(supervisor, "stop", recording_stop)
    await backends.remove_engine("extra")
    assert seen_at_stop == [False] and task.done()
    assert "extra" not in backends.supervisors and "extra" not in backends.state.fleet.engines
    assert "extra" not in backends.state.admission.capacity.names()
    assert engines.members_changed == [None, None]


async def test_upstreams_join_are_replaced_and_leave_with_their_probes(upstreams: Live) -> None:
    """An upstream a reload adds joins its pool and is probed at once; one whose table changed
    is replaced (new client, new probe, the old probe cancelled); one removed leaves the fleet
    and its pool, its probe cancelled."""
    backends, state = upstreams.backends, upstreams.backends.state
    assert set(backends.probes) == {"far"}
    old_probe, old_client = backends.probes["far"], state.fleet.client("far")
    elsewhere = short_tmpdir("llmd-far-") / "elsewhere.sock"
    near = short_tmpdir("llmd-near-") / "missing.sock"
    raw: dict[str, Any] = {
        "far": {"url": f"unix:{elsewhere}", "models": ["far"]},
        "near": {"url": f"unix:{near}", "models": ["near"]},
    }
    config = _load(multi_sim_config(ensure_tiny_model(), {}, upstreams=raw))
    backends.apply_upstreams(config)
    await asyncio.wait({old_probe}, timeout=10)
    assert old_probe.cancelled()
    assert set(backends.probes) == {"far", "near"} and backends.probes["far"] is not old_probe
    assert state.fleet.client("far") is not old_client
    assert state.fleet.upstreams["far"].url == f"unix:{elsewhere}"
    assert state.admission.capacity.pool("near") == ("near",)
    far_probe = backends.probes["far"]
    only_near = _load(multi_sim_config(ensure_tiny_model(), {}, upstreams={"near": raw["near"]}))
    backends.apply_upstreams(only_near)
    await asyncio.wait({far_probe}, timeout=10)
    assert far_probe.cancelled() and set(backends.probes) == {"near"}
    assert "far" not in state.fleet.upstreams and state.admission.capacity.pool("far") is None
    assert set(backends.upstream_tables) == {"near"}


async def test_an_engine_serving_other_names_moves_to_their_pools(engines: Live) -> None:
    """When an engine answers to names beyond its configured one (a LoRA adapter), it joins
    their pools and each gets a validator."""
    backends, state = engines.backends, engines.backends.state
    assert state.admission.capacity.pool("tiny-lora") is None
    state.fleet.engines["main"].served_models = ("tiny", "tiny-lora")
    backends.engine_changed("main")
    assert state.admission.capacity.pool("tiny-lora") == ("main",)
    assert state.validators.for_model("tiny-lora") is not None


async def test_a_pending_table_applies_once_through_the_daemons_apply(engines: Live) -> None:
    """A table a reload kept pending applies when asked (the supervisor's next boot runs it,
    the daemon's `apply` gets the new tables, the keys changed are returned) and is pending no
    more; an engine with nothing pending answers None."""
    backends = engines.backends
    main = backends.state.config.engine_tables["main"]
    changed = dataclasses.replace(main, args=(*main.args, "--step-base-ms", "5"))
    backends.pending = {"main": changed}
    assert backends.pending_engine == changed and backends.pending_engines() == ["main"]
    assert await backends.apply_pending("main") == ["engine.args"]
    assert backends.supervisors["main"].engine == changed
    assert engines.applied == [{"main": changed}]
    assert backends.pending_engine is None and await backends.apply_pending("main") is None


async def test_a_deployed_table_the_config_refuses_is_rolled_back(engines: Live) -> None:
    """A deploy's table whose `apply` raises ConfigError leaves the engine's supervisor on its
    table, and the error reaches the deploy; one applied becomes the next boot's."""
    backends = engines.backends
    main = backends.state.config.engine_tables["main"]
    other = dataclasses.replace(main, args=(*main.args, "--step-base-ms", "5"))
    engines.refuse = True
    with pytest.raises(ConfigError):
        backends.use_engine_table("main", other)
    assert backends.supervisors["main"].engine == main and engines.applied == []
    engines.refuse = False
    backends.use_engine_table("main", other)
    assert backends.supervisors["main"].engine == other
    assert engines.applied == [{"main": other}]
