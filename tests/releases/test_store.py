"""The store: records listed oldest first, unreadable ones reported, the history appended."""

from __future__ import annotations

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


def test_a_record_not_utf8_is_a_release_error_naming_its_line(
    store: ReleaseStore, model_dir: Path
) -> None:
    """A record with a byte that is not UTF-8 (a corrupted disk, an editor's encoding) is a
    ReleaseError naming the file, the line and the byte, listed as a problem, not a
    UnicodeDecodeError."""
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    (store.root / "bad.json").write_bytes(b'{\n  "name": "caf\xe9"\n}\n')
    with pytest.raises(ReleaseError) as raised:
        store.get("bad")
    assert str(raised.value) == (
        f"{store.root / 'bad.json'}:2: cannot read the release record: not UTF-8 text "
        "(byte 0xe9 at offset 16)"
    )
    releases, problems = store.releases()
    assert [r.name for r in releases] == ["r1"] and problems == [str(raised.value)]


def test_history_lines_are_appended_and_stamped(store: ReleaseStore) -> None:
    """Each event is one JSON line with `at` in UTC; a torn line, or one that is not UTF-8, is
    skipped and reported with its number."""
    first = store.append_history({"engine": "main", "event": "deploy_started"})
    assert first["at"].endswith("+00:00")
    with store.history_path.open("ab") as handle:
        handle.write(b'{"torn": \n{"event": "caf\xe9"}\n')
    store.append_history({"engine": "main", "event": "promoted"})
    events, problems = store.history()
    assert [e["event"] for e in events] == ["deploy_started", "promoted"]
    assert problems == [
        f"{store.history_path}:2: not a JSON object, skipped",
        f"{store.history_path}:3: not UTF-8 text, skipped",
    ]


def test_a_store_that_cannot_be_written_fails_before_any_file_is_read(
    tmp_path: Path, model_dir: Path
) -> None:
    """State directory on a path that is a file: a ReleaseError naming the path, raised before
    the model is hashed (no digest cache anywhere)."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ReleaseError, match="cannot create"):
        create_release(ReleaseStore(tmp_path / "file"), "r1", "main", engine(model_dir), NoNvml())
    assert not list(tmp_path.rglob(".digest-cache.json"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files for another user")
def test_files_written_as_root_belong_to_the_state_directorys_owner(
    tmp_path: Path, model_dir: Path
) -> None:
    """`sudo llmd release create` in llmd's state dir: the daemon's user owns what it wrote."""
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 65534, 65534)
    store = ReleaseStore(state)
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    store.append_history({"event": "deploy_started"})
    written = [store.root, *store.root.iterdir()]
    assert {p.name for p in written} >= {"releases", "r1.json", ".lock", "history.jsonl"}
    assert {(p.stat().st_uid, p.stat().st_gid) for p in written} == {(65534, 65534)}
