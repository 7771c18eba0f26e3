"""What a reload changes, decided before anything is touched. Pure.

Reload is start-up again (gunicorn's arbiter): every part built from the config takes the new
one (`Daemon.apply`). Three kinds of key cannot apply to a running llmd, and a plan says which:
the listen address and the runtime directory need llmd itself restarted (its sockets are
bound); the engine table applies when the engine restarts (`llmd restart` takes it; until then
it is pending and nothing built from it changes, so the running engine and what llmd assumes of
it stay consistent); a send buffer set back to 0 (the kernel's autotuning) needs new sockets.
"""

from __future__ import annotations

import dataclasses

from llmd.config import Config, EngineConfig


@dataclasses.dataclass(frozen=True)
class ReloadPlan:
    """`config`: what applies now (the new config, but with the current values of the keys
    below). `llmd_restart`: changed keys that need llmd restarted. `engine`: the new engine
    table when it differs from the running one (None: same), with its changed keys in
    `engine_keys`; `llmd restart` applies it."""

    config: Config
    llmd_restart: list[str]
    engine: EngineConfig | None
    engine_keys: list[str]

    @property
    def needs_restart(self) -> list[str]:
        """Every changed key that is not applied now."""
        return [*self.llmd_restart, *self.engine_keys]


def plan_reload(current: Config, new: Config) -> ReloadPlan:
    """The plan for reloading from `current` (the running config) to `new` (just loaded)."""
    llmd_restart = []
    server = new.server
    if server.listen != current.server.listen:
        llmd_restart.append("server.listen")
    if server.runtime_dir != current.server.runtime_dir:
        llmd_restart.append("server.runtime_dir")
    keep_buffer = server.send_buffer_bytes == 0 and current.server.send_buffer_bytes != 0
    if keep_buffer:
        llmd_restart.append("server.send_buffer_bytes")
    server = dataclasses.replace(
        server,
        listen=current.server.listen,
        runtime_dir=current.server.runtime_dir,
        send_buffer_bytes=(
            current.server.send_buffer_bytes if keep_buffer else server.send_buffer_bytes
        ),
    )
    engine_keys = changed_engine_keys(current.engine, new.engine)
    return ReloadPlan(
        config=dataclasses.replace(new, server=server, engine=current.engine),
        llmd_restart=llmd_restart,
        engine=new.engine if engine_keys else None,
        engine_keys=engine_keys,
    )


def changed_engine_keys(old: EngineConfig, new: EngineConfig) -> list[str]:
    """The `engine.*` keys whose values differ."""
    return [
        f"engine.{field.name}"
        for field in dataclasses.fields(EngineConfig)
        if getattr(new, field.name) != getattr(old, field.name)
    ]
