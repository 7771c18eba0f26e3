"""Where an engine stands among its releases, the table a release boots with, and why one
cannot boot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llmd.errors import ReleaseError
from llmd.releases.position import Position, boot_table, cannot_boot, positions, running_release
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml, engine


def line(event: str, old: str, new: str, engine_name: str = "main") -> dict[str, str]:
    return {"engine": engine_name, "event": event, "old": old, "new": new}


def test_promotions_and_rollbacks_move_current_and_previous() -> None:
    """promoted: new current, old previous; rolled_back: old current, previous kept."""
    history = [
        line("deploy_started", "r1", "r2"),
        line("promoted", "r1", "r2"),
        line("rolled_back", "r2", "r3"),
        line("promoted", "r1", "r9", "other"),
    ]
    assert positions(history) == {
        "main": Position(current="r2", previous="r1"),
        "other": Position(current="r9", previous="r1"),
    }


def test_running_release_follows_the_table_the_engine_runs(
    store: ReleaseStore, model_dir: Path
) -> None:
    """The history's current release when it records the running table; else the newest
    release recording it; else none."""
    table = engine(model_dir)
    create_release(store, "a", "main", table, NoNvml())
    create_release(store, "b", "main", table, NoNvml())
    releases = store.releases()[0]
    assert running_release("main", table, releases, []) == Position(current="b")
    history = [line("promoted", "b", "a")]
    assert running_release("main", table, releases, history) == Position("a", "b")
    other = engine(model_dir, args=("--seed", "3"))
    assert running_release("main", other, releases, history) == Position()


def test_boot_table_takes_a_secret_back_only_when_its_digest_matches(
    store: ReleaseStore, model_dir: Path
) -> None:
    """An API key recorded as a digest boots with the configured value when they match; a
    changed key, or another served name, is refused."""
    table = engine(model_dir, env={"VLLM_API_KEY": "k1", "OMP_NUM_THREADS": "2"})
    release, _ = create_release(store, "a", "main", table, NoNvml())
    assert boot_table(release, table).env == {"OMP_NUM_THREADS": "2", "VLLM_API_KEY": "k1"}
    with pytest.raises(ReleaseError, match="VLLM_API_KEY as a digest"):
        boot_table(release, engine(model_dir, env={"VLLM_API_KEY": "k2"}))
    with pytest.raises(ReleaseError, match="keeps the served model name"):
        boot_table(release, dataclasses.replace(table, served_model_name="other"))


def test_a_release_whose_files_are_gone_cannot_boot(store: ReleaseStore, model_dir: Path) -> None:
    """Each missing pinned file is named (three, then how many more)."""
    release, _ = create_release(store, "a", "main", engine(model_dir), NoNvml())
    assert cannot_boot(release) is None
    (model_dir / "config.json").unlink()
    assert cannot_boot(release) == f"release a's files are gone: {model_dir / 'config.json'}"
