"""`llmd release gc`: which records go and why, decided from the deploy history (pure), and its
application to the store.

Never removed: the current and the previous release of every engine (the last `promoted` event
names both), both releases of a deploy still in progress or of one that `failed`, and the `keep`
newest records of each engine.

By default only records (and the cached digests of files no kept record names) are removed,
never model files. With `models=True` a model directory also goes when all of these hold:
- it lies under `<state-dir>/models/` (llmd owns it);
- a removed record names it;
- no kept record and no configured engine names it.
Directories elsewhere (a home directory, a shared hub cache) are never touched.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmd.releases.atomic import locked
from llmd.releases.record import Release
from llmd.releases.store import ReleaseStore

DEFAULT_KEEP = 10


@dataclasses.dataclass(frozen=True)
class GcDecision:
    """Whether release `name` stays, and why."""

    name: str
    keep: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What gc did (or would do, `dry_run`): a decision per release, the model directories
    removed, the cache entries dropped."""

    decisions: tuple[GcDecision, ...]
    removed_models: tuple[str, ...]
    cache_entries_dropped: int
    dry_run: bool


def protected(history: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Release name -> why the history protects it, from the deploy events in order (the
    state machine's `promoted`, `rolled_back`, `failed` and `deploy_started` lines; an
    `interrupted` deploy is no longer in progress: its old release is the current one)."""
    current: dict[str, str] = {}
    previous: dict[str, str] = {}
    open_deploys: dict[str, tuple[str, str]] = {}
    failed: dict[str, tuple[str, str]] = {}
    for event in history:
        engine, old, new = event.get("engine"), event.get("old"), event.get("new")
        if not isinstance(engine, str) or not isinstance(new, str):
            continue
        kind = event.get("event")
        if kind == "deploy_started" and isinstance(old, str):
            open_deploys[engine] = (old, new)
            failed.pop(engine, None)
        elif kind == "promoted":
            open_deploys.pop(engine, None)
            if isinstance(old, str):
                previous[engine] = old
            current[engine] = new
        elif kind == "rolled_back" and isinstance(old, str):
            open_deploys.pop(engine, None)
            current[engine] = old
        elif kind == "failed" and isinstance(old, str):
            open_deploys.pop(engine, None)
            failed[engine] = (old, new)
        elif kind == "interrupted":
            open_deploys.pop(engine, None)
    reasons: dict[str, str] = {}
    for engine, (old, new) in sorted(failed.items()):
        reasons.setdefault(old, f"in the failed deploy on engine {engine}")
        reasons.setdefault(new, f"in the failed deploy on engine {engine}")
    for engine, (old, new) in sorted(open_deploys.items()):
        reasons[old] = reasons[new] = f"in a deploy in progress on engine {engine}"
    for engine, name in sorted(previous.items()):
        reasons[name] = f"previous release of engine {engine}"
    for engine, name in sorted(current.items()):
        reasons[name] = f"current release of engine {engine}"
    return reasons


def plan_gc(
    releases: Sequence[Release], history: Iterable[Mapping[str, Any]], keep: int
) -> list[GcDecision]:
    """A decision for each release (oldest first, as given): protected by the history, among
    the `keep` newest of its engine, or removed."""
    reasons = protected(history)
    newest: dict[str, list[str]] = {}
    for release in sorted(releases, key=lambda r: (r.created_at, r.name), reverse=True):
        newest.setdefault(release.engine, []).append(release.name)
    decisions = []
    for release in releases:
        rank = newest[release.engine].index(release.name)
        if release.name in reasons:
            decisions.append(GcDecision(release.name, True, reasons[release.name]))
        elif rank < keep:
            decisions.append(
                GcDecision(
                    release.name, True, f"one of the {keep} newest of engine {release.engine}"
                )
            )
        else:
            decisions.append(
                GcDecision(
                    release.name,
                    False,
                    f"older than the {keep} newest of engine {release.engine}, "
                    "neither current nor previous",
                )
            )
    return decisions


def run_gc(
    store: ReleaseStore,
    keep: int = DEFAULT_KEEP,
    *,
    dry_run: bool = False,
    models: bool = False,
    configured_models: Iterable[str] = (),
) -> GcReport:
    """Apply `plan_gc` to `store` under its lock (see the module docstring for `models`;
    `configured_models` are the model and tokenizer paths of the engines in llmd's config).
    Raises ReleaseError (unreadable history) or OSError (the directory cannot be written)."""
    releases, _ = store.releases()
    history, _ = store.history()
    decisions = plan_gc(releases, history, keep)
    by_name = {r.name: r for r in releases}
    kept = [by_name[d.name] for d in decisions if d.keep]
    removed = [by_name[d.name] for d in decisions if not d.keep]
    doomed_models = (
        _removable_models(store.state_dir, removed, kept, configured_models) if models else []
    )
    dropped = 0
    if not dry_run and store.root.is_dir():
        with locked(store.root / ".lock"):
            for release in removed:
                store.remove(release.name)
            for directory in doomed_models:
                shutil.rmtree(directory)
            keep_paths = set().union(*(r.files.paths() for r in kept)) if kept else set()
            dropped = store.digest_cache().prune(keep_paths)
    return GcReport(tuple(decisions), tuple(doomed_models), dropped, dry_run)


def _removable_models(
    state_dir: Path, removed: Sequence[Release], kept: Sequence[Release], configured: Iterable[str]
) -> list[str]:
    owned = (state_dir / "models").resolve()
    in_use = {str(Path(p).expanduser().resolve()) for p in configured}
    for release in kept:
        in_use |= {release.files.model_dir, release.files.tokenizer_dir}
    candidates = set()
    for release in removed:
        for directory in (release.files.model_dir, release.files.tokenizer_dir):
            path = Path(directory).resolve()
            if path.is_relative_to(owned) and path != owned and path.is_dir():
                candidates.add(str(path))
    # A directory inside (or around) one still in use goes neither.
    return sorted(
        c
        for c in candidates
        if not any(Path(c).is_relative_to(u) or Path(u).is_relative_to(c) for u in in_use)
    )
