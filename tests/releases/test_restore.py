"""What an engine boots when llmd starts: its current release from the deploy history, unless
the config file's table changed since the deploy or the release's files are gone."""

from __future__ import annotations

import shutil
from pathlib import Path

from llmd.releases.restore import restore, table_digest
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import ARGS, NoNvml, engine

R1_ARGS, R2_ARGS = ARGS, (*ARGS, "--seed", "7")


def deployed(store: ReleaseStore, model: Path, config: str | None) -> None:
    """r1 and r2 recorded; a deploy promoted r2 over r1 beside a config file whose table
    digest was `config` (None: a history line from before the field)."""
    create_release(store, "r1", "main", engine(model, R1_ARGS), NoNvml())
    create_release(store, "r2", "main", engine(model, R2_ARGS), NoNvml())
    line = {"deploy": "d1", "engine": "main", "old": "r1", "new": "r2", "event": "promoted"}
    store.append_history(line if config is None else {**line, "config": config})


def test_the_current_release_boots_in_place_of_the_unchanged_file_table(
    store: ReleaseStore, model_dir: Path
) -> None:
    """File table r1, history says r2 is current, the file unchanged since: r2's table boots
    (with the file's timeouts), and the restoration says so."""
    file_table = engine(model_dir, R1_ARGS, start_timeout_s=7.0)
    deployed(store, model_dir, table_digest(file_table))
    tables, choices = restore(store, {"main": file_table})
    assert tables["main"].args == R2_ARGS and tables["main"].start_timeout_s == 7.0
    [choice] = choices
    assert (choice.restored, choice.release, choice.event) == (
        True,
        "r2",
        "engine_release_restored",
    )
    assert "restored from the state directory" in choice.note


def test_history_without_the_config_digest_restores_too(
    store: ReleaseStore, model_dir: Path
) -> None:
    """A deploy recorded before the field existed: the release is restored."""
    deployed(store, model_dir, None)
    tables, _ = restore(store, {"main": engine(model_dir, R1_ARGS)})
    assert tables["main"].args == R2_ARGS


def test_an_edited_config_file_wins(store: ReleaseStore, model_dir: Path) -> None:
    """The file's table changed since the deploy (the operator's edit): it boots, noted."""
    deployed(store, model_dir, table_digest(engine(model_dir, R1_ARGS)))
    edited = engine(model_dir, (*ARGS, "--seed", "3"))
    tables, [choice] = restore(store, {"main": edited})
    assert tables["main"] == edited and not choice.restored
    assert choice.event == "engine_release_not_restored"
    assert "config file's table changed since release r2" in choice.note


def test_a_release_whose_files_are_gone_falls_back_to_the_file(
    store: ReleaseStore, model_dir: Path, tmp_path: Path
) -> None:
    """r2's model directory removed: the file's table boots, the note names the file."""
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    file_table = engine(model_dir, R1_ARGS)
    create_release(store, "r1", "main", file_table, NoNvml())
    create_release(store, "r2", "main", engine(copy, R2_ARGS), NoNvml())
    store.append_history(
        {"engine": "main", "old": "r1", "new": "r2", "event": "promoted", "config": "x"}
    )
    store.append_history(  # a later deploy beside the same file
        {"engine": "main", "old": "r1", "new": "r2", "event": "promoted"}
    )
    shutil.rmtree(copy)
    tables, [choice] = restore(store, {"main": file_table})
    assert tables["main"] == file_table and not choice.restored
    assert "files are gone" in choice.note and str(copy) in choice.note


def test_nothing_to_restore(store: ReleaseStore, model_dir: Path) -> None:
    """No history, or the current release is the file's table: no restoration."""
    file_table = engine(model_dir, R1_ARGS)
    assert restore(store, {"main": file_table}) == ({"main": file_table}, [])
    deployed(store, model_dir, None)
    r2_table = engine(model_dir, R2_ARGS)
    assert restore(store, {"main": r2_table}) == ({"main": r2_table}, [])
