"""The tiny test model, generated once per checkout by scripts/make_tiny_model.py."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from tests.support.llmd_process import REPO

# The demo and the tests share one generated model: generating it is deterministic.
TINY_MODEL = Path(os.environ.get("LLMD_TINY_MODEL", REPO / "var" / "models" / "tiny"))


@functools.cache
def ensure_tiny_model() -> Path:
    """Generate the tiny model if it is missing (idempotent; checked once per test session);
    its directory."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_tiny_model.py"), str(TINY_MODEL)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return TINY_MODEL


def ensure_tiny_variant(seed: int) -> Path:
    """A variant of the tiny model (another tokenizer corpus and other weights, from `seed`),
    generated if missing beside the tiny model; its directory."""
    path = TINY_MODEL.parent / f"tiny-seed{seed}"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "make_tiny_model.py"),
            str(path),
            "--seed",
            str(seed),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return path
