"""The shipped unit, sysusers and tmpfiles snippets, and the install script (dry run and --root):
the unit verifies, rates OK in `systemd-analyze security`, keeps what a GPU server needs open,
and lets a start-up failure stop the service."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.llmd_process import REPO

INSTALL = REPO / "scripts" / "install-systemd.sh"
UNIT = REPO / "systemd" / "llmd.service"
# `systemd-analyze security`'s "OK" band ends at 3.0 (MEDIUM above, up to 6.9).
MAX_EXPOSURE = 3.0


def settings(unit: Path) -> dict[str, dict[str, list[str]]]:
    """Every `Key=value` of `unit` by section, each key's values in order (a unit may repeat a
    key, e.g. DeviceAllow=; configparser keeps only the last)."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    section = ""
    for line in unit.read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found[section][key].append(value)
    return found


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


def test_systemd_analyze_security_rates_the_unit_ok(tmp_path: Path) -> None:
    """`systemd-analyze security --offline=true` rates the installed unit at most 3.0 ("OK")."""
    unit = installed_unit(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    overall = re.search(r"Overall exposure level for llmd\.service: (\d+\.\d+)", result.stdout)
    assert overall is not None, result.stdout
    assert float(overall.group(1)) <= MAX_EXPOSURE, result.stdout


def test_a_config_error_stops_the_service_for_good() -> None:
    """The config is checked by the main process (`llmd serve`, exit 78), not by an
    ExecStartPre= whose status RestartPreventExitStatus= never sees (systemd.service(5)), and
    78 and 79 are not restarted."""
    service = settings(UNIT)["Service"]
    assert "ExecStartPre" not in service and "ExecStartPost" not in service
    (main,) = service["ExecStart"]
    assert main.startswith("@LLMD@ serve --config /etc/llmd/llmd.toml ")
    assert service["Restart"] == ["on-failure"]
    assert {"78", "79"} <= set(" ".join(service["RestartPreventExitStatus"]).split())


def test_the_sandbox_leaves_a_gpu_model_server_what_it_needs() -> None:
    """The hardening keeps CUDA, NVML, torch and Triton working: the NVIDIA device groups
    allowed, JIT memory, NUMA binding, /proc/driver and netlink kept, writable compile caches
    under the cache directory (not the private /tmp), and the modules loaded before start."""
    unit = settings(UNIT)
    service = unit["Service"]
    allowed = {value.split()[0]: value.split()[1] for value in service["DeviceAllow"]}
    assert service["DevicePolicy"] == ["closed"]
    assert {"char-nvidia-frontend", "char-nvidia", "char-nvidia-uvm"} <= set(allowed)
    assert allowed["char-nvidia-uvm"] == "rw" and allowed["char-nvidia-caps"] == "r"
    for left_open in ("MemoryDenyWriteExecute", "PrivateDevices", "ProcSubset", "PrivateUsers"):
        assert left_open not in service, left_open
    assert "AF_NETLINK" in service["RestrictAddressFamilies"][0].split()
    assert not any("@resources" in f for f in service["SystemCallFilter"] if f.startswith("~"))
    assert service["CapabilityBoundingSet"] == [""] and service["NoNewPrivileges"] == ["yes"]
    assert service["UMask"] == ["0077"] and service["ProtectSystem"] == ["strict"]
    environment = dict(e.split("=", 1) for v in service["Environment"] for e in v.split())
    for cache in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "HF_HOME"):
        assert environment[cache].startswith("/var/cache/llmd/"), cache
    assert service["CacheDirectory"] == ["llmd"]
    wants = " ".join(unit["Unit"]["Wants"]).split()
    assert {"modprobe@nvidia.service", "modprobe@nvidia_uvm.service"} <= set(wants)


@pytest.mark.parametrize("section", ["Unit", "Service"])
def test_every_setting_says_why(section: str) -> None:
    """Each paragraph of settings in the unit carries a comment giving its reason."""
    text = UNIT.read_text().split(f"[{section}]\n", 1)[1].split("\n[", 1)[0]
    for paragraph in text.split("\n\n"):
        lines = [line for line in paragraph.splitlines() if line]
        if any(not line.startswith("#") for line in lines):
            assert any(line.startswith("#") for line in lines), paragraph
