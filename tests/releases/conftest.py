"""Fixtures for the release tests: a private copy of the tiny model (so a test may change its
files) and a state directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmd.config import EngineConfig
from llmd.releases.store import ReleaseStore

ARGS = ("--max-model-len", "1024", "--enforce-eager")


@pytest.fixture
def model_dir(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A copy of the tiny model that the test owns."""
    copy = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_model_dir, copy)
    return copy


@pytest.fixture
def store(tmp_path: Path) -> ReleaseStore:
    """An empty release store in a temporary state directory."""
    return ReleaseStore(tmp_path / "state")


def engine(model: Path, args: tuple[str, ...] = ARGS, **fields: object) -> EngineConfig:
    """An `[engine]` table serving `model` as `tiny` on llmd's own interpreter."""
    return EngineConfig(
        model=str(model),
        served_model_name="tiny",
        args=args,
        **fields,  # type: ignore[arg-type]
    )


class NoNvml:
    """pynvml as it behaves without an NVIDIA driver."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("NVML Shared Library Not Found")


class FakeNvml:
    """pynvml on a host with a driver."""

    NVMLError = NoNvml.NVMLError

    def __init__(self) -> None:
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.14"

    def nvmlShutdown(self) -> None:
        self.shut = True
