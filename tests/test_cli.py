"""The `llmd` command's own handling of bad input: numbers refused by argparse (exit 64,
EX_USAGE, in one line), a config that cannot be read refused as a config error (exit 78)."""

from __future__ import annotations

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


def test_serve_that_may_not_write_its_runtime_dir_exits_77(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd serve` whose runtime directory this user may not create (the daemon's start-up
    raises PermissionError): one line naming the directory and what to do, exit 77
    (EX_NOPERM), no traceback."""
    denied = "/run/llmd"

    async def refused(self: object) -> int:
        raise PermissionError(13, "Permission denied", denied)

    monkeypatch.setattr("llmd.daemon.daemon.Daemon.serve", refused)
    monkeypatch.setattr("llmd.logs.configure_logging", lambda config: None)
    monkeypatch.setattr("llmd.allocator.fix_mmap_threshold", lambda: None)
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--config", str(config), "--runtime-dir", str(tmp_path / "run")])
    assert exited.value.code == 77
    assert capsys.readouterr().err == (
        f"llmd: cannot start: Permission denied: {denied}: run it as the llmd user (systemctl "
        "start llmd), or pass --runtime-dir and --state-dir it may write\n"
    )
