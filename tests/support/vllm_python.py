"""Which Python runs vLLM in the tests, and which vLLM version it has.

`LLMD_TEST_VLLM_PYTHON` names it (default: this interpreter, .venv's); scripts/test-compat.sh sets
it to another venv's to run the engine tests against another vLLM version. It runs the engine
booted directly (tests/support/vllm_engine.py) and llmd's (`engine.python`,
tests/support/configs.py), and the simulator of the contract suite mimics its version.
"""

from __future__ import annotations

import functools
import os
import sys

from llmd.engine.launch import installed_engine_build

VLLM_PYTHON = os.environ.get("LLMD_TEST_VLLM_PYTHON") or sys.executable


@functools.cache
def vllm_version() -> str:
    """The vLLM version `VLLM_PYTHON` has ('0.32.0'), as llmd reads it for `engine.python`.
    Raises RuntimeError when it has none."""
    build = installed_engine_build(VLLM_PYTHON)
    if not build:
        raise RuntimeError(f"no vLLM installed for {VLLM_PYTHON}")
    return build.split()[1].split("+")[0]


def vllm_release() -> tuple[int, int]:
    """(major, minor) of `vllm_version()`: (0, 32)."""
    major, minor = vllm_version().split(".")[:2]
    return int(major), int(minor)
