"""AMX on the engine's CPU: whether the host has it, and the environment that lets vLLM use it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# A folder holding only a `sitecustomize.py` that requests the AMX tile permission (see there).
AMX_BOOT_DIR = Path(__file__).parent / "amx_boot"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's flags in `cpuinfo` (empty where the file cannot be read: not Linux)."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def host_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU flags in `cpuinfo` include `amx_tile` (Intel Sapphire Rapids and later).

    False where the file cannot be read (not Linux).
    """
    return "amx_tile" in cpu_flags(cpuinfo)


def with_amx_permission(env: Mapping[str, str], inherited: Mapping[str, str]) -> dict[str, str]:
    """`env` with `AMX_BOOT_DIR` first on PYTHONPATH, so every Python process of the engine asks
    for the AMX permission at start-up. PYTHONPATH is taken from `env`, else from `inherited`
    (the environment the engine will inherit), and kept after ours.
    """
    existing = env.get("PYTHONPATH", inherited.get("PYTHONPATH", ""))
    path = os.pathsep.join(p for p in (str(AMX_BOOT_DIR), existing) if p)
    return {**env, "PYTHONPATH": path}
