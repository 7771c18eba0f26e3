"""Config reload: what applies live, what waits for a restart."""

from __future__ import annotations

import dataclasses

from llmd.config import Config, EngineConfig, ServerConfig, SupervisorConfig, reload_config


def test_limits_apply_and_engine_changes_are_reported() -> None:
    """Server limits and policy apply at once; engine keys and listen keep their values."""
    current = Config(engine=EngineConfig(model="a", args=("--x",)))
    new = Config(
        server=ServerConfig(listen="127.0.0.1:9", max_body_bytes=10),
        engine=EngineConfig(model="b", args=("--x",)),
        supervisor=SupervisorConfig(max_failed_boots=9),
    )
    applied, pending = reload_config(current, new)
    assert applied.server.max_body_bytes == 10 and applied.supervisor.max_failed_boots == 9
    assert applied.engine == current.engine and applied.server.listen == current.server.listen
    assert pending == ["server.listen", "engine.model"]


def test_unchanged_config_needs_nothing() -> None:
    """Reloading the same config changes nothing and needs no restart."""
    config = Config(engine=EngineConfig(model="a"))
    applied, pending = reload_config(config, dataclasses.replace(config))
    assert applied == config and pending == []
