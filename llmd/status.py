"""The one `Status` contract: a frozen snapshot read by `llmd status`, the TUI and metrics.

Serialised with `dataclasses.asdict` to JSON; fields are only ever added, never renamed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from llmd import __version__
from llmd.proxy.context import ProxyContext


@dataclasses.dataclass(frozen=True)
class EngineStatus:
    """The engine: phase, pid, model, version, uptime (s), restarts, last exit (kind and detail)."""

    state: str
    pid: int | None
    model: str
    version: str
    max_model_len: int | None
    uptime_s: float | None
    restarts: int
    last_exit_reason: str | None
    last_exit_detail: str | None


@dataclasses.dataclass(frozen=True)
class Status:
    """Everything an operator sees at a glance; `taken_at` is Unix time (s)."""

    llmd_version: str
    taken_at: float
    listen: str
    draining: bool
    in_flight: int
    engine: EngineStatus

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def take_snapshot(ctx: ProxyContext) -> Status:
    """A snapshot of llmd now, from the proxy context and the engine state it holds."""
    engine = ctx.engine
    uptime = engine.uptime_s()
    return Status(
        llmd_version=__version__,
        taken_at=time.time(),
        listen=ctx.config.server.listen,
        draining=ctx.draining,
        in_flight=len(ctx.inflight),
        engine=EngineStatus(
            state=engine.phase.value,
            pid=engine.pid,
            model=engine.model or ctx.config.engine.model_name,
            version=engine.engine_version,
            max_model_len=engine.max_model_len,
            uptime_s=round(uptime, 1) if uptime is not None else None,
            restarts=engine.restarts,
            last_exit_reason=engine.last_exit.kind if engine.last_exit else None,
            last_exit_detail=engine.last_exit.detail if engine.last_exit else None,
        ),
    )
