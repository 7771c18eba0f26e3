"""The store: records listed oldest first, unreadable ones reported, the history appended."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from llmd.errors import ReleaseError
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml, engine


def test_an_empty_store_lists_nothing(store: ReleaseStore) -> None:
    """No state directory yet: no releases, no history, no error."""
    assert store.releases() == ([], [])
    assert store.history() == ([], [])


def test_releases_are_listed_oldest_first(store: ReleaseStore, model_dir: Path) -> None:
    """By created_at, then name."""
    for name in ("b", "a", "c"):
        release, _ = create_release(store, name, "main", engine(model_dir), NoNvml())
        # Records are immutable on disk; rewrite the timestamps to order them for the test.
        stamp = {"b": "2025-01-02T00:00:00+00:00", "a": "2025-01-03T00:00:00+00:00"}
        data = {**release.to_dict(), "created_at": stamp.get(name, "2025-01-01T00:00:00+00:00")}
        path = store.path(name)
        os.chmod(path, 0o644)
        path.write_text(json.dumps(data))
    assert [r.name for r in store.releases()[0]] == ["c", "b", "a"]


def test_an_unknown_name_says_which_exist(store: ReleaseStore, model_dir: Path) -> None:
    """`get` of a missing release lists the known ones."""
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    with pytest.raises(ReleaseError, match=r"no release 'r9'.*known: r1"):
        store.get("r9")


def test_an_unreadable_record_is_reported_not_fatal(store: ReleaseStore, model_dir: Path) -> None:
    """A corrupt record: the others still list, the problem is named."""
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    (store.root / "bad.json").write_text("{")
    releases, problems = store.releases()
    assert [r.name for r in releases] == ["r1"]
    assert len(problems) == 1 and "bad.json is not valid JSON" in problems[0]


def test_history_lines_are_appended_and_stamped(store: ReleaseStore) -> None:
    """Each event is one JSON line with `at` in UTC; a torn line is skipped and reported."""
    first = store.append_history({"engine": "main", "event": "deploy_started"})
    assert first["at"].endswith("+00:00")
    with store.history_path.open("a") as handle:
        handle.write('{"torn": \n')
    store.append_history({"engine": "main", "event": "promoted"})
    events, problems = store.history()
    assert [e["event"] for e in events] == ["deploy_started", "promoted"]
    assert problems == [f"{store.history_path}:2: not a JSON object, skipped"]


def test_a_store_that_cannot_be_written_says_where(tmp_path: Path, model_dir: Path) -> None:
    """State directory on a path that is a file: a ReleaseError naming the path."""
    (tmp_path / "file").write_text("")
    store = ReleaseStore(tmp_path / "file")
    release, _ = create_release(
        ReleaseStore(tmp_path / "ok"), "r1", "main", engine(model_dir), NoNvml()
    )
    with pytest.raises(ReleaseError, match="cannot write"):
        store.create(dataclasses.replace(release))
