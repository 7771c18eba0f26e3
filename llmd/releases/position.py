"""Where each engine stands among its releases: the current and previous release (from the
deploy history, else the newest record of the running table), the engine table a release boots
with, and why a release cannot boot (its files are gone)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from llmd.config import EngineConfig
from llmd.errors import ReleaseError
from llmd.releases.record import Release, engine_table, secret_digest

# The history lines that end a deploy (`deploy_started` begins one): the state machine's
# `promoted`, `rolled_back` and `failed`, and `interrupted`, a deploy that llmd's stop cut
# (written as it stops, or at the next start for one a killed llmd left open).
CLOSING = ("promoted", "rolled_back", "failed", "interrupted")


@dataclasses.dataclass(frozen=True)
class Position:
    """An engine's `current` release (None: it runs no recorded release) and the one before
    it (`previous`: what `llmd rollback` returns to; None: none yet)."""

    current: str | None = None
    previous: str | None = None


def positions(history: Iterable[Mapping[str, Any]]) -> dict[str, Position]:
    """Each engine's position after the deploy events of `history` (oldest first): `promoted`
    makes the new release current and the old one previous; `rolled_back` leaves the old one
    current. Engines without an ended deploy are absent."""
    found: dict[str, Position] = {}
    for event in history:
        engine, old, new = event.get("engine"), event.get("old"), event.get("new")
        if not (isinstance(engine, str) and isinstance(old, str) and isinstance(new, str)):
            continue
        if event.get("event") == "promoted":
            found[engine] = Position(current=new, previous=old)
        elif event.get("event") == "rolled_back":
            found[engine] = Position(current=old, previous=found.get(engine, Position()).previous)
    return found


def open_deploys(history: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Engine name -> the `deploy_started` line of its deploy that no `CLOSING` line ended,
    from `history` (oldest first)."""
    found: dict[str, dict[str, Any]] = {}
    for event in history:
        engine = event.get("engine")
        if not isinstance(engine, str):
            continue
        if event.get("event") == "deploy_started":
            found[engine] = dict(event)
        elif event.get("event") in CLOSING:
            found.pop(engine, None)
    return found


def running_release(
    name: str,
    table: EngineConfig,
    releases: Iterable[Release],
    history: Iterable[Mapping[str, Any]],
) -> Position:
    """Engine `name`'s position when it runs `table`: the history's, when its current release
    records `table`; else the newest release of `name` that records `table` (no previous)."""
    mine = [r for r in releases if r.engine == name]
    recorded = engine_table(table)
    position = positions(history).get(name)
    if position is not None and any(
        r.name == position.current and r.table == recorded for r in mine
    ):
        return position
    same = [r for r in mine if r.table == recorded]
    return Position(current=same[-1].name) if same else Position()


def boot_table(release: Release, current: EngineConfig) -> EngineConfig:
    """The engine table that runs `release` in place of `current`: the release's model, name,
    interpreter, command, args and environment, with the current table's GPUs and timeouts.
    An environment value the record keeps as a digest (a secret) is taken from `current` when
    its digest matches. Raises ReleaseError when it does not, or when the release serves
    another model name (a replace keeps the pool)."""
    recorded = release.table
    if recorded.served_model_name != current.model_name:
        raise ReleaseError(
            f"release {release.name} serves {recorded.served_model_name!r}, the engine "
            f"{current.model_name!r}: a deploy keeps the served model name"
        )
    env = {}
    for key, value in recorded.env.items():
        live = current.env.get(key)
        if value.startswith("sha256:") and live is not None and secret_digest(live) == value:
            value = live
        elif value.startswith("sha256:") and live != value:
            raise ReleaseError(
                f"release {release.name} records {key} as a digest and the configured value "
                "differs: set it in the engine's env as it was when the release was created"
            )
        env[key] = value
    return dataclasses.replace(
        current,
        kind=recorded.kind,  # type: ignore[arg-type]
        model=recorded.model,
        served_model_name=recorded.served_model_name,
        python=recorded.python,
        command=recorded.command,
        args=recorded.args,
        env=env,
    )


def cannot_boot(release: Release) -> str | None:
    """Why `release` cannot boot any more (its pinned files are gone), or None."""
    missing = release.files.missing()
    if not missing:
        return None
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return f"release {release.name}'s files are gone: {', '.join(missing[:3])}{more}"
