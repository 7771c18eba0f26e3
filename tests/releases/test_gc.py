"""gc: never the current or previous release of an engine; model directories only when llmd
owns them (under <state-dir>/models) and nothing kept or configured names them."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, cast

from llmd.releases.gc import plan_gc, protected, run_gc
from llmd.releases.model_files import ModelFiles
from llmd.releases.orchestrator import Deployer
from llmd.releases.record import Release
from llmd.releases.steps import DeployHost
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml, engine


def deploy(engine_name: str, old: str, new: str, *events: str) -> list[dict[str, Any]]:
    return [{"engine": engine_name, "old": old, "new": new, "event": e} for e in events]


def releases(store: ReleaseStore, model: Path, names: str, engine_name: str = "main") -> None:
    """Store releases `names` (one letter each, oldest first, in January 2025) of `model`."""
    scratch = ReleaseStore(store.state_dir.parent / "scratch")
    first, _ = create_release(scratch, "seed-" + engine_name, engine_name, engine(model), NoNvml())
    for day, name in enumerate(names, 1):
        store.create(
            dataclasses.replace(first, name=name, created_at=f"2025-01-{day:02d}T00:00:00+00:00")
        )


def decisions(store: ReleaseStore, keep: int) -> dict[str, str]:
    found, _ = store.releases()
    history, _ = store.history()
    return {
        d.name: ("keep: " if d.keep else "drop: ") + d.reason for d in plan_gc(found, history, keep)
    }


def test_the_last_promotion_names_current_and_previous() -> None:
    """Promoted a->b then b->c: c is current, b previous; a rolled-back d changes neither."""
    history = [
        *deploy("main", "a", "b", "deploy_started", "promoted"),
        *deploy("main", "b", "c", "deploy_started", "promoted"),
        *deploy("main", "c", "d", "deploy_started", "rolled_back"),
    ]
    assert protected(history) == {
        "c": "current release of engine main",
        "b": "previous release of engine main",
    }


def test_deploys_in_progress_or_failed_protect_both_releases() -> None:
    """An unfinished deploy and a failed one keep their old and new releases."""
    history = [
        *deploy("main", "a", "b", "deploy_started"),
        *deploy("side", "x", "y", "deploy_started", "failed"),
    ]
    assert protected(history) == {
        "a": "in a deploy in progress on engine main",
        "b": "in a deploy in progress on engine main",
        "x": "in the failed deploy on engine side",
        "y": "in the failed deploy on engine side",
    }


def test_an_interrupted_deploy_is_no_longer_in_progress() -> None:
    """A deploy that llmd's stop cut (`interrupted`) protects neither release as in progress."""
    history = deploy("main", "a", "b", "deploy_started", "drained", "interrupted")
    assert protected(history) == {}


def test_a_deploy_left_open_is_closed_interrupted_at_start_up(tmp_path: Path) -> None:
    """A deploy a killed llmd left open gets one `interrupted` line, with its identity, when
    the next llmd starts; deploys that ended, and a second start, add nothing."""
    store = ReleaseStore(tmp_path)
    lines = [
        {"deploy": "d1", "strategy": "replace", "engine": "main", "old": "a", "new": "b"},
        {"deploy": "d2", "strategy": "canary", "engine": "side", "old": "x", "new": "y"},
    ]
    ended = (("deploy_started", "drained"), ("deploy_started", "failed"))
    for line, events in zip(lines, ended, strict=True):
        for event in events:
            store.append_history({**line, "event": event})
    deployer = Deployer(cast(DeployHost, None), store)
    deployer.close_interrupted()
    deployer.close_interrupted()
    history, _ = store.history()
    assert [(h["engine"], h["event"]) for h in history[4:]] == [("main", "interrupted")]
    assert {k: history[4][k] for k in lines[0]} == lines[0]
    assert not any("in progress" in why for why in protected(history).values())


def test_gc_keeps_the_newest_and_the_protected_and_says_why(
    store: ReleaseStore, model_dir: Path
) -> None:
    """keep 1: the newest, plus current and previous however old; the rest go."""
    releases(store, model_dir, "abcde")
    for event in deploy("main", "a", "b", "deploy_started", "promoted"):
        store.append_history(event)
    plan = decisions(store, keep=1)
    assert plan["a"] == "keep: previous release of engine main"
    assert plan["b"] == "keep: current release of engine main"
    assert plan["e"] == "keep: one of the 1 newest of engine main"
    assert plan["c"].startswith("drop: older than the 1 newest of engine main")
    report = run_gc(store, keep=1)
    assert [d.name for d in report.decisions if not d.keep] == ["c", "d"]
    assert sorted(r.name for r in store.releases()[0]) == ["a", "b", "e"]


def test_keep_counts_per_engine(store: ReleaseStore, model_dir: Path) -> None:
    """Each engine keeps its own newest."""
    releases(store, model_dir, "ab", "main")
    releases(store, model_dir, "xy", "side")
    run_gc(store, keep=1)
    assert sorted(r.name for r in store.releases()[0]) == ["b", "y"]


def test_a_dry_run_changes_nothing(store: ReleaseStore, model_dir: Path) -> None:
    """--dry-run reports the same decisions and removes nothing."""
    releases(store, model_dir, "abc")
    report = run_gc(store, keep=0, dry_run=True)
    assert report.dry_run and not any(d.keep for d in report.decisions)
    assert len(store.releases()[0]) == 3


def test_gc_drops_cached_digests_of_files_no_kept_release_names(
    store: ReleaseStore, model_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Releases of a second model removed: its digests leave the cache, the kept ones stay."""
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    create_release(store, "old", "main", engine(other), NoNvml())
    create_release(store, "new", "main", engine(model_dir), NoNvml())
    report = run_gc(store, keep=1)
    assert report.cache_entries_dropped == 6
    _, cache = create_release(store, "again", "main", engine(model_dir), NoNvml())
    assert cache.files_hashed == 0


def owned_model(store: ReleaseStore, tiny_model_dir: Path, name: str) -> Path:
    path = store.state_dir / "models" / name
    shutil.copytree(tiny_model_dir, path)
    return path


def test_models_go_only_when_llmd_owns_them_and_nothing_names_them(
    store: ReleaseStore, tiny_model_dir: Path, model_dir: Path
) -> None:
    """--models: an owned directory only removed records name goes; an owned one a kept
    release or the config names stays; a directory outside the state dir never goes."""
    gone = owned_model(store, tiny_model_dir, "gone")
    configured = owned_model(store, tiny_model_dir, "configured")
    kept = owned_model(store, tiny_model_dir, "kept")
    create_release(store, "r-outside", "main", engine(model_dir), NoNvml())
    create_release(store, "r-gone", "main", engine(gone), NoNvml())
    create_release(store, "r-configured", "main", engine(configured), NoNvml())
    create_release(store, "r-kept", "main", engine(kept), NoNvml())
    report = run_gc(store, keep=1, models=True, configured_models=[str(configured)])
    assert {d.name for d in report.decisions if not d.keep} == {
        "r-outside", "r-gone", "r-configured",
    }  # fmt: skip
    assert report.removed_models == (str(gone.resolve()),)
    assert not gone.exists() and configured.is_dir() and kept.is_dir() and model_dir.is_dir()


def test_without_models_no_directory_is_touched(store: ReleaseStore, tiny_model_dir: Path) -> None:
    """The default removes records only."""
    owned = owned_model(store, tiny_model_dir, "m")
    create_release(store, "r1", "main", engine(owned), NoNvml())
    report = run_gc(store, keep=0)
    assert report.removed_models == () and owned.is_dir()


def test_a_release_whose_model_is_gone_names_the_missing_files(model_dir: Path) -> None:
    """`ModelFiles.missing` is what a deploy checks before it may roll back to a release."""
    files = ModelFiles(str(model_dir), str(model_dir), {"model.safetensors": "x"}, {}, {}, {}, None)
    (model_dir / "model.safetensors").unlink()
    assert files.missing() == [str(model_dir / "model.safetensors")]
    assert Release  # the record type that carries these files
