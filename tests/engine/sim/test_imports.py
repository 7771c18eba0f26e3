"""The simulator's entry modules import no aiohttp, torch, transformers or vLLM: every
simulator start (about 290 in the fast suite) pays for what they import."""

from __future__ import annotations

import subprocess
import sys

ENTRY_MODULES = ("llmd.engine.sim.__main__", "llmd.engine.sim.app", "llmd.engine.sim.server")
NOT_IMPORTED = ("aiohttp", "torch", "transformers", "vllm")


def test_simulator_imports_no_aiohttp_torch_or_vllm() -> None:
    """A fresh Python that imports the simulator's entry modules has none of these loaded."""
    script = (
        "import importlib, sys\n"
        f"for name in {ENTRY_MODULES!r}: importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_IMPORTED!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
