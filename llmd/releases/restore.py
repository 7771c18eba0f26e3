"""What each engine boots when llmd starts: its current release from the state directory (the
one the last deploy or rollback left serving), unless:
- the config file's table changed since that deploy (the operator's edit wins), or
- the release cannot boot any more (its files are gone: the file's table, with a warning).

Each ended deploy's history line carries `config`, the digest of the config file's table of
the engine at that time (`table_digest`), so a later start can tell an edited file from the
one the deploy ran beside. History written before that field existed restores the release.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from llmd.config import EngineConfig
from llmd.errors import ReleaseError
from llmd.releases.position import boot_table, cannot_boot, positions
from llmd.releases.record import engine_table
from llmd.releases.store import ReleaseStore

ENDED = ("promoted", "rolled_back")


@dataclasses.dataclass(frozen=True)
class Restoration:
    """Engine `engine`'s start-up choice: `restored` (its current release `release` boots in
    place of the file's table) or not, with the log `event` and the `note` the status shows."""

    engine: str
    release: str
    restored: bool
    note: str

    @property
    def event(self) -> str:
        return "engine_release_restored" if self.restored else "engine_release_not_restored"


def table_digest(table: EngineConfig) -> str:
    """The digest of an engine table's launch fields (as a release records them): 16 hex."""
    recorded = dataclasses.asdict(engine_table(table))
    text = json.dumps(recorded, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def restore(
    store: ReleaseStore, file_tables: Mapping[str, EngineConfig]
) -> tuple[dict[str, EngineConfig], list[Restoration]]:
    """The tables the engines of `file_tables` (the config file's) boot with, and one
    Restoration per engine whose current release is not the file's table. A store that cannot
    be read restores nothing (reading the releases then logs `releases_unreadable`)."""
    tables = dict(file_tables)
    try:
        releases, _ = store.releases()
        history, _ = store.history()
    except ReleaseError:
        return tables, []
    records = {release.name: release for release in releases}
    choices = []
    for name, position in positions(history).items():
        table = file_tables.get(name)
        if table is None or position.current is None:
            continue
        release = records.get(position.current)
        if release is not None and release.table == engine_table(table):
            continue  # the file's table is the current release
        choice, booted = _choose(name, position.current, release, table, _config_of(history, name))
        choices.append(choice)
        if booted is not None:
            tables[name] = booted
    return tables, choices


def _choose(
    name: str, current: str, release: Any, table: EngineConfig, digest: str | None
) -> tuple[Restoration, EngineConfig | None]:
    def kept(why: str) -> tuple[Restoration, None]:
        return Restoration(name, current, False, why + "; the config file's table runs"), None

    if release is None:
        return kept(f"release {current}, current by the deploy history, has no record")
    if digest is not None and digest != table_digest(table):
        return kept(f"the config file's table changed since release {current} was deployed")
    why = cannot_boot(release)
    if why is not None:
        return kept(why)
    try:
        booted = boot_table(release, table)
    except ReleaseError as exc:
        return kept(str(exc))
    note = f"release {current} restored from the state directory (the last deploy left it)"
    return Restoration(name, current, True, note), booted


def _config_of(history: Iterable[Mapping[str, Any]], engine: str) -> str | None:
    """The config file's table digest recorded by engine `engine`'s last ended deploy."""
    found = None
    for line in history:
        if line.get("engine") == engine and line.get("event") in ENDED:
            value = line.get("config")
            found = value if isinstance(value, str) else None
    return found
