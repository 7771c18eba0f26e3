"""The `llmd` command's own handling of bad input: numbers refused by argparse (exit 64,
EX_USAGE, in one line), a config that cannot be read refused as a config error (exit 78)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from llmd.cli import main
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["drain", "--timeout", "nan"], "--timeout: expected a finite number, not 'nan'"),
        (["drain", "--timeout", "inf"], "--timeout: expected a finite number"),
        (["drain", "--timeout", "-1"], "--timeout: expected seconds in [0, 2592000]"),
        (["drain", "--timeout", "1e308"], "--timeout: expected seconds in [0, 2592000]"),
        (["check-config", "--gpu-memory-gib", "nan"], "--gpu-memory-gib: expected a finite"),
        (["check-config", "--gpu-memory-gib", "inf"], "--gpu-memory-gib: expected a finite"),
        (["check-config", "--gpu-memory-gib", "-1"], "--gpu-memory-gib: expected a number > 0"),
        (["check-config", "--gpu-memory-gib", "0"], "--gpu-memory-gib: expected a number > 0"),
        (
            ["check-config", "--typical-tokens", "-5"],
            "--typical-tokens: expected a whole number >= 1",
        ),
        (["check-config", "--typical-tokens", "1.5"], "--typical-tokens: expected a whole number"),
        (["doctor", "--gpu-memory-gib", "nan"], "--gpu-memory-gib: expected a finite"),
        (["deploy", "r", "--step-s", "0"], "--step-s: expected seconds in (0, 2592000]"),
        (["release", "gc", "--keep", "-1"], "--keep: expected a whole number >= 0"),
        (["bench", "--url", "u", "--duration", "nan"], "--duration: expected a finite"),
        (["bench", "--url", "u", "--disconnect-share", "1.5"], "--disconnect-share: expected a"),
        (["bench", "--url", "u", "--warmup", "-1"], "--warmup: expected a whole number >= 0"),
        (["tune", "--slo-ttft-p95-ms", "inf", "--output", "o"], "--slo-ttft-p95-ms: expected a"),
        (["tune", "--slo-ttft-p95-ms", "1", "--output", "o", "--concurrency", "0"], "--concur"),
    ],
)
def test_a_bad_number_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad number is refused by argparse with exit 64 in one line naming the verb, the option,
    the rule and where help is, before anything runs (no traceback, no request the daemon
    refuses)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 64
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert err.startswith(f"llmd {argv[0]}") and err.endswith(" --help`)\n")


@pytest.mark.parametrize("verb", [["check-config"], ["serve", "--config"]])
def test_a_config_not_utf8_exits_78_naming_the_file(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd check-config` and `llmd serve` on a config with a byte that is not UTF-8 exit 78
    (EX_CONFIG) naming the file and line, without a traceback."""
    path = tmp_path / "llmd.toml"
    path.write_bytes(b'[engine]\nmodel = "m"\n# caf\xe9\n')
    with pytest.raises(SystemExit) as exited:
        main([*verb, str(path)])
    assert exited.value.code == 78
    err = capsys.readouterr().err
    assert f"llmd: {path}:3: cannot read config: not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["deploy", "r1", "--canary", "5,abc"], "argument --canary: '5,abc': expected whole"),
        (["deploy", "r1", "--canary", "5,50"], "argument --canary: '5,50': expected rising"),
        (["serve", "--listen", "abc"], "argument --listen: 'abc': expected HOST:PORT"),
        (["serve", "--listen", ":8395"], "argument --listen: ':8395': expected HOST:PORT"),
        (["serve", "--listen", "127.0.0.1:99999"], "--listen: '127.0.0.1:99999': expected"),
        (
            ["tune", "--slo-ttft-p95-ms", "5", "--output", "o", "--max-num-seqs", "8,x"],
            "argument --max-num-seqs: '8,x': expected comma-separated numbers",
        ),
        (["usage", "--since", "bogus"], "argument --since: expected a duration like 90s"),
        (["usage", "--since", "bogus"], "not 'bogus'"),
        (["status", "--bogus"], "unrecognized arguments: --bogus"),
        (["drain", "--wait", "--bogus", "x"], "unrecognized arguments: --bogus x"),
        (["tenant", "list", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_of_its_verb(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value the parser can check (canary steps, HOST:PORT, a list of numbers, a duration)
    and an unknown option are refused at parse time: exit 64, one line that starts with the
    verb (`llmd tenant list:`), names the option and quotes the whole value."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 64
    err = capsys.readouterr().err
    verb = " ".join(argv[:2]) if argv[0] == "tenant" else argv[0]
    assert message in err and err.count("\n") == 1
    assert err.startswith(f"llmd {verb}: ") and err.endswith(f"`llmd {verb} --help`)\n")


@pytest.fixture
def no_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """`llmd serve` in the test's process: no logging set up, the allocator left as it is."""
    monkeypatch.setattr("llmd.logs.configure_logging", lambda config: None)
    monkeypatch.setattr("llmd.allocator.fix_mmap_threshold", lambda: None)


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EACCES, "Permission denied", "/run/llmd"),
        PermissionError(errno.EPERM, "Operation not permitted", "/run/llmd"),
        OSError(errno.EROFS, "Read-only file system", "/run/llmd"),
    ],
)
@pytest.mark.usefixtures("no_start_up")
def test_serve_that_may_not_write_its_runtime_dir_exits_77(
    error: OSError,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`llmd serve` whose runtime directory this user may not create or write (the daemon's
    start-up raises EACCES, EPERM, or EROFS on a read-only mount): one line naming the
    directory and what to do, exit 77 (EX_NOPERM), no traceback."""

    async def refused(self: object) -> int:
        raise error

    monkeypatch.setattr("llmd.daemon.daemon.Daemon.serve", refused)
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", str(config), "--runtime-dir", str(tmp_path / "run")])
    assert exited.value.code == 77
    assert capsys.readouterr().err == (
        f"llmd: cannot start: {error.strerror}: /run/llmd: run it as the llmd user (systemctl "
        "start llmd), or pass --runtime-dir and --state-dir it may write\n"
    )


@pytest.mark.usefixtures("no_start_up")
def test_serve_that_may_not_write_its_state_dir_exits_77_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd serve` with a state directory it may not create (under /sys: EPERM even for root)
    exits 77 at start naming it, instead of serving and losing usage at the first request."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    state = "/sys/llmd-test-state"
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "serve",
                "--config",
                str(config),
                "--runtime-dir",
                str(tmp_path / "run"),
                "--state-dir",
                state,
            ]
        )
    assert exited.value.code == 77
    assert (
        f"llmd: cannot start: Operation not permitted: {state}: run it" in capsys.readouterr().err
    )


@pytest.mark.usefixtures("no_start_up")
def test_serve_whose_runtime_dir_is_a_file_exits_78_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd serve --runtime-dir` naming a regular file: exit 78, 'is not a directory'."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", str(config), "--runtime-dir", str(config)])
    assert exited.value.code == 78
    assert capsys.readouterr().err.startswith(f"llmd: cannot start: {config} is not a directory")


def _long_dir(tmp_path: Path) -> Path:
    """A directory under `tmp_path` whose admin socket's path is past 107 bytes."""
    return tmp_path / ("d" * max(1, 100 - len(str(tmp_path))))


@pytest.mark.usefixtures("no_start_up")
def test_serve_with_a_runtime_dir_too_long_for_its_sockets_exits_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd serve --runtime-dir` whose socket paths pass the 107 bytes of sun_path: exit 78
    before start, naming the option, the socket's path and the limit."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    run = _long_dir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", str(config), "--runtime-dir", str(run)])
    assert exited.value.code == 78
    err = capsys.readouterr().err
    assert err.startswith(f"llmd: --runtime-dir = '{run}': the socket {run}/engine.sock is ")
    assert "over the 107 a Unix socket's path may have" in err


def test_check_config_refuses_a_runtime_dir_too_long_for_its_sockets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd check-config` on a server.runtime_dir too long for its sockets exits 78 as serve
    would, naming the key and the limit."""
    run = _long_dir(tmp_path)
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model(), server={"runtime_dir": str(run)}))
    with pytest.raises(SystemExit) as exited:
        main(["check-config", str(config)])
    assert exited.value.code == 78
    err = capsys.readouterr().err
    assert f"server.runtime_dir = '{run}': the socket" in err and "over the 107" in err
