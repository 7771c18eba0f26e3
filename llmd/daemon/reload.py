"""What a reload changes, decided before anything is touched. Pure.

Reload is start-up again (gunicorn's arbiter): every part built from the config takes the new
one (`LiveConfig.apply`), upstreams included (pool membership, URLs, keys, limits: an upstream
that is gone takes no new request, those running there finish). Three kinds of key cannot apply to a
running llmd, and a plan says which:
- the listen address and the runtime directory need llmd itself restarted (its sockets are
  bound);
- a supervised engine's table applies when that engine restarts (`llmd restart [--engine
  NAME]` takes it; until then it is pending and nothing built from it changes, so the running
  engine and what llmd assumes of it stay consistent), and so do an engine added or removed;
- a send buffer set back to 0 (the kernel's autotuning) needs new sockets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from llmd.config import Config, EngineConfig
from llmd.config.backends import MAIN


@dataclasses.dataclass(frozen=True)
class ReloadPlan:
    """`config`: what applies now (the new config, but with the current values of the keys
    below). `llmd_restart`: changed keys that need llmd restarted. `engines`: each engine whose
    table differs from the running one, with its new table (None: removed from the config);
    `engine_keys` names what changed (`engine.args`, `engines.NAME.args`, `engines.NAME`
    for an added or removed engine); `llmd restart [--engine NAME]` applies them."""

    config: Config
    llmd_restart: list[str]
    engines: dict[str, EngineConfig | None]
    engine_keys: list[str]

    @property
    def needs_restart(self) -> list[str]:
        """Every changed key that is not applied now."""
        return [*self.llmd_restart, *self.engine_keys]

    @property
    def engine(self) -> EngineConfig | None:
        """The pending table of the `main` engine, when only it changed (one [engine])."""
        if set(self.engines) == {MAIN}:
            return self.engines[MAIN]
        return None


def plan_reload(
    current: Config, new: Config, file_tables: Mapping[str, EngineConfig] | None = None
) -> ReloadPlan:
    """The plan for reloading from `current` (the running config) to `new` (just loaded).
    `file_tables` are engine tables the config file had when last read (an engine absent
    from it: its running table): an engine runs another table after a deploy, and its table in
    the file is pending only when the file changed it since."""
    llmd_restart = []
    server = new.server
    if server.listen != current.server.listen:
        llmd_restart.append("server.listen")
    if server.runtime_dir != current.server.runtime_dir:
        llmd_restart.append("server.runtime_dir")
    if server.state_dir != current.server.state_dir:
        llmd_restart.append("server.state_dir")
    keep_buffer = server.send_buffer_bytes == 0 and current.server.send_buffer_bytes != 0
    if keep_buffer:
        llmd_restart.append("server.send_buffer_bytes")
    if new.swap_groups != current.swap_groups:
        # The swap groups are built at start-up (llmd/daemon/swapping.py).
        llmd_restart.append("swap_groups")
    server = dataclasses.replace(
        server,
        listen=current.server.listen,
        runtime_dir=current.server.runtime_dir,
        state_dir=current.server.state_dir,
        send_buffer_bytes=(
            current.server.send_buffer_bytes if keep_buffer else server.send_buffer_bytes
        ),
    )
    old_tables, new_tables = current.engine_tables, new.engine_tables
    single = set(old_tables) | set(new_tables) == {MAIN} and not new.engines
    engines: dict[str, EngineConfig | None] = {}
    engine_keys: list[str] = []
    for name in [*old_tables, *(n for n in new_tables if n not in old_tables)]:
        old, table = old_tables.get(name), new_tables.get(name)
        if old is None or table is None:
            engines[name] = table
            engine_keys.append(f"engines.{name}")
            continue
        prefix = "engine" if single else f"engines.{name}"
        keys = changed_engine_keys((file_tables or {}).get(name, old), table, prefix)
        if keys:
            engines[name] = table
            engine_keys += keys
    return ReloadPlan(
        config=with_engine_tables(
            dataclasses.replace(new, server=server, swap_groups=current.swap_groups), old_tables
        ),
        llmd_restart=llmd_restart,
        engines=engines,
        engine_keys=engine_keys,
    )


def changed_engine_keys(old: EngineConfig, new: EngineConfig, prefix: str = "engine") -> list[str]:
    """The keys (`prefix.NAME`) whose values differ between two engine tables."""
    return [
        f"{prefix}.{field.name}"
        for field in dataclasses.fields(EngineConfig)
        if getattr(new, field.name) != getattr(old, field.name)
    ]


def with_engine_tables(config: Config, tables: Mapping[str, EngineConfig]) -> Config:
    """`config` running the engines `tables`: one `main` alone as `[engine]`, else as
    `[engines.NAME]`."""
    if set(tables) == {MAIN}:
        return dataclasses.replace(config, engine=tables[MAIN], engines={})
    return dataclasses.replace(config, engine=EngineConfig(), engines=dict(tables))
