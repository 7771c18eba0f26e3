"""A DaemonState wired as the daemon wires it, for tests that run parts of llmd without it."""

from __future__ import annotations

from pathlib import Path

from llmd.admission.control import Admission
from llmd.backends.fleet import Fleet, PoolLimits
from llmd.config import Config
from llmd.runtime import RuntimePaths
from llmd.state import DaemonState
from llmd.supervisor.state import EngineState
from llmd.telemetry.observer import Observer
from llmd.validation.pools import Validators, model_sources


def daemon_state(
    config: Config,
    engine: EngineState | None = None,
    observer: Observer | None = None,
    runtime_dir: Path = Path("/nonexistent"),
) -> DaemonState:
    """The state of a daemon with `config`, its `main` engine's state and observer (fresh by
    default), its runtime directory at `runtime_dir`."""
    paths = RuntimePaths(runtime_dir)
    fleet = Fleet(paths)
    for name, table in config.engine_tables.items():
        state = fleet.add_engine(name, table)
        if engine is not None and name == "main":
            fleet.engines[name] = engine
            engine.model = engine.model or state.model
    for name, upstream in config.upstreams.items():
        fleet.add_upstream(name, upstream)
    validators = Validators(fleet.client_of, lambda model: PoolLimits(fleet, model))
    validators.configure(config, model_sources(config))
    return DaemonState(
        config=config,
        paths=paths,
        fleet=fleet,
        admission=Admission(config, fleet.engines),
        validators=validators,
        observer=observer or Observer(),
    )
