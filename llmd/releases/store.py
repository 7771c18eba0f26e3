"""The release store in llmd's state directory:

<state-dir>/releases/NAME.json        one record each, written once, mode 0444
<state-dir>/releases/history.jsonl    deploy events, one JSON object a line, appended
<state-dir>/releases/.digest-cache.json   file digests by identity (llmd/releases/digests)
<state-dir>/releases/.lock            flock held by every writer
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmd.config import EngineConfig
from llmd.errors import ReleaseError
from llmd.releases.atomic import adopt_owner, locked, sync_directory, write_atomic
from llmd.releases.digests import DigestCache
from llmd.releases.record import Release, build_release, check_name
from llmd.textfiles import not_utf8

DEFAULT_STATE_DIR = Path("/var/lib/llmd")


class ReleaseStore:
    """Records and history under `state_dir`/releases. Methods raise ReleaseError with the
    path and the reason when the directory cannot be read or written."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.root = state_dir / "releases"

    @property
    def history_path(self) -> Path:
        return self.root / "history.jsonl"

    def path(self, name: str) -> Path:
        """Where release `name`'s record lives."""
        return self.root / f"{check_name(name)}.json"

    def digest_cache(self) -> DigestCache:
        """The digest cache of this state directory."""
        return DigestCache(self.root / ".digest-cache.json")

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def create(self, release: Release) -> Path:
        """Write `release` once; a record of that name already there is never replaced.
        Raises ReleaseError when the name is taken or the directory is not writable."""
        path = self.path(release.name)
        self.prepare()
        try:
            with locked(self.root / ".lock"):
                if path.exists():
                    raise ReleaseError(_taken(path))
                data = json.dumps(release.to_dict(), indent=2, sort_keys=True) + "\n"
                write_atomic(path, data.encode(), mode=0o444)
        except OSError as exc:
            raise ReleaseError(f"cannot write {path}: {exc.strerror or exc}") from exc
        return path

    def get(self, name: str) -> Release:
        """Release `name`. Raises ReleaseError when there is none or it cannot be read."""
        path = self.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            known = ", ".join(r.name for r in self.releases()[0]) or "none"
            raise ReleaseError(f"no release {name!r} in {self.root} (known: {known})") from exc
        except OSError as exc:
            raise ReleaseError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line, why = not_utf8(data, exc)
            raise ReleaseError(f"{path}:{line}: cannot read the release record: {why}") from None
        try:
            return Release.from_dict(json.loads(text))
        except ValueError as exc:
            raise ReleaseError(f"{path} is not valid JSON: {exc}") from exc

    def releases(self) -> tuple[list[Release], list[str]]:
        """Every readable release, oldest first (by created_at, then name), and one line per
        record that could not be read."""
        if not self.root.is_dir():
            return [], []
        found, problems = [], []
        for path in sorted(self.root.glob("*.json")):
            if path.name.startswith("."):
                continue
            try:
                found.append(self.get(path.stem))
            except ReleaseError as exc:
                problems.append(str(exc))
        found.sort(key=lambda r: (r.created_at, r.name))
        return found, problems

    def remove(self, name: str) -> None:
        """Delete release `name`'s record (gc only; the caller holds the lock)."""
        path = self.path(name)
        path.unlink()
        sync_directory(path.parent)

    def append_history(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Append one deploy event, stamped `at` (UTC, ms), as one line; the line written.
        Raises ReleaseError."""
        line = {"at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")}
        line.update(event)
        self.prepare()
        try:
            with locked(self.root / ".lock"), self.history_path.open("a") as handle:
                adopt_owner(self.history_path)
                handle.write(json.dumps(line, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise ReleaseError(f"cannot append to {self.history_path}: {exc}") from exc
        return line

    def history(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The deploy events, oldest first, and one line per line that is not a JSON object
        in UTF-8 (a torn last line after a crash, say), skipped."""
        try:
            data = self.history_path.read_bytes()
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise ReleaseError(f"cannot read {self.history_path}: {exc}") from exc
        events, problems = [], []
        for number, raw in enumerate(data.splitlines(), 1):
            try:
                event = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                problems.append(f"{self.history_path}:{number}: not UTF-8 text, skipped")
                continue
            except ValueError:
                event = None
            if isinstance(event, dict):
                events.append(event)
            elif raw.strip():
                problems.append(f"{self.history_path}:{number}: not a JSON object, skipped")
        return events, problems

    def prepare(self) -> None:
        """Create the releases directory (mode 0750, owned as the state directory when run as
        root) if it is missing. Raises ReleaseError when it cannot be created."""
        try:
            if not self.root.is_dir():
                self.root.mkdir(parents=True, mode=0o750)
                adopt_owner(self.root)
        except OSError as exc:
            raise ReleaseError(f"cannot create {self.root}: {exc.strerror or exc}") from exc


def create_release(
    store: ReleaseStore, name: str, engine_name: str, engine: EngineConfig, nvml: Any
) -> tuple[Release, DigestCache]:
    """Build release `name` of `engine` and store it; the release and the digest cache used
    (its `files_hashed` tells what had to be read). A taken name is refused before any file is
    hashed. Raises ReleaseError."""
    if store.exists(name):
        raise ReleaseError(_taken(store.path(name)))
    store.prepare()  # an unwritable state directory fails before a 15 GB model is read
    cache = store.digest_cache()
    release = build_release(name, engine_name, engine, cache, nvml)
    store.create(release)
    # The record is written; a cache that cannot be saved only costs a re-read next time.
    with contextlib.suppress(OSError):
        cache.save()
    return release, cache


def _taken(path: Path) -> str:
    return (
        f"release {path.stem!r} exists ({path}); releases are immutable: choose another name "
        "(`llmd release list` shows the taken ones)"
    )
