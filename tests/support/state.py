"""A DaemonState wired as the daemon wires it, for tests that run parts of llmd without it."""

from __future__ import annotations

from pathlib import Path

from llmd.admission.waiters import Admission
from llmd.config import Config
from llmd.engine.client import EngineClient
from llmd.runtime import RuntimePaths
from llmd.state import DaemonState
from llmd.supervisor.state import EngineState
from llmd.telemetry.observer import Observer
from llmd.validation.validator import Validator


def daemon_state(
    config: Config,
    engine: EngineState | None = None,
    observer: Observer | None = None,
    runtime_dir: Path = Path("/nonexistent"),
) -> DaemonState:
    """The state of a daemon with `config`, its engine state and observer (fresh by default),
    its runtime directory at `runtime_dir`."""
    paths = RuntimePaths(runtime_dir)
    engine = engine or EngineState(model=config.engine.model_name)
    upstream = EngineClient(paths.engine_socket)
    return DaemonState(
        config=config,
        paths=paths,
        engine=engine,
        admission=Admission(config, engine),
        validator=Validator(config, engine, upstream.session),
        observer=observer or Observer(),
        upstream=upstream,
    )
