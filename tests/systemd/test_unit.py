"""The shipped unit, sysusers and tmpfiles snippets, and the install script (dry run and --root)."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

from tests.support.llmd_process import REPO

INSTALL = REPO / "scripts" / "install-systemd.sh"


def installed_unit(root: Path) -> Path:
    llmd = Path(sys.executable).with_name("llmd")
    subprocess.run(["bash", str(INSTALL), "--root", str(root), "--llmd", str(llmd)], check=True)
    return root / "etc" / "systemd" / "system" / "llmd.service"


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the unit as installed (CI installs systemd's tools)."""
    unit = installed_unit(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "llmd.service" not in result.stderr, result.stderr  # no warnings about our unit


def test_unit_keeps_the_lifecycle_contract(tmp_path: Path) -> None:
    """Type=notify, watchdog, mixed kill, drain fits the stop timeout, give-ups not restarted."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(installed_unit(tmp_path))
    service = parser["Service"]
    assert service["Type"] == "notify" and service["KillMode"] == "mixed"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert set(service["RestartPreventExitStatus"].split()) == {"78", "79"}
    drain_s, engine_stop_s = 30, 20  # the defaults in etc/llmd.toml
    assert int(service["TimeoutStopSec"]) > drain_s + engine_stop_s
    assert int(service["WatchdogSec"]) > 1
    assert service["ExecStart"].startswith(str(Path(sys.executable).with_name("llmd")))


def test_install_dry_run_changes_nothing() -> None:
    """--dry-run prints the install steps and writes nothing."""
    llmd = Path(sys.executable).with_name("llmd")
    result = subprocess.run(
        ["bash", str(INSTALL), "--dry-run", "--llmd", str(llmd)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "+ install -D -m 0644" in result.stdout and "+ systemctl daemon-reload" in result.stdout
    assert "+ systemd-sysusers" in result.stdout
