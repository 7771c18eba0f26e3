"""The AMX start-up hook: found on the host's CPU flags, and every engine Python asks for the
permission that vLLM's AMX attention kernel needs (without it the worker dies of SIGILL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmd.config import EngineConfig
from llmd.engine import launch
from llmd.engine.amx import AMX_BOOT_DIR, host_has_amx, with_amx_permission

# Asks Linux which extended features this process may use (ARCH_GET_XCOMP_PERM) and prints
# whether AMX tile data (bit 18) is among them.
PRINT_PERMISSION = """
import ctypes
mask = ctypes.c_uint64(0)
ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask))
print(bool(mask.value & (1 << 18)))
"""


def test_amx_is_read_from_the_cpu_flags(tmp_path: Path) -> None:
    """`amx_tile` among the flags means AMX; other flags or no file do not."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n")
    assert host_has_amx(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16\n")
    assert not host_has_amx(cpuinfo)
    assert not host_has_amx(tmp_path / "missing")


def test_the_hook_goes_first_and_keeps_the_path_it_found() -> None:
    """PYTHONPATH: the hook's folder, then the engine table's value, else the inherited one."""
    assert with_amx_permission({}, {})["PYTHONPATH"] == str(AMX_BOOT_DIR)
    inherited = with_amx_permission({"A": "1"}, {"PYTHONPATH": "/x"})
    assert inherited == {"A": "1", "PYTHONPATH": f"{AMX_BOOT_DIR}{os.pathsep}/x"}
    own = with_amx_permission({"PYTHONPATH": "/y"}, {"PYTHONPATH": "/x"})
    assert own["PYTHONPATH"] == f"{AMX_BOOT_DIR}{os.pathsep}/y"


def test_a_vllm_launch_carries_the_hook_on_amx_hosts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM engines get the hook when the host has AMX; the simulator never does."""
    vllm = EngineConfig(kind="vllm", model="/m")
    sim = EngineConfig(kind="sim", model="/m")
    for has_amx in (True, False):
        monkeypatch.setattr(launch, "host_has_amx", lambda has=has_amx: has)
        path = launch.engine_launch(vllm, Path("/s")).env.get("PYTHONPATH", "")
        assert (str(AMX_BOOT_DIR) in path) is has_amx
        assert "PYTHONPATH" not in launch.engine_launch(sim, Path("/s")).env


def test_a_python_started_with_the_hook_may_use_amx_and_runs_the_next_hook(
    tmp_path: Path,
) -> None:
    """A child Python with the hook has the AMX permission where the CPU has AMX, and another
    `sitecustomize` further down PYTHONPATH still runs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_HOOK'] = 'ran'\n")
    env = with_amx_permission({**os.environ}, os.environ)
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}{os.pathsep}{other}"
    script = PRINT_PERMISSION + "import os\nprint(os.environ.get('OTHER_HOOK'))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [str(host_has_amx()), "ran"]
    assert done.stderr == ""


def test_the_hook_alone_is_silent() -> None:
    """With no other `sitecustomize` to hand over to, the hook prints nothing."""
    env = with_amx_permission({**os.environ}, {})
    done = subprocess.run(
        [sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, check=True
    )
    assert done.stderr == ""
