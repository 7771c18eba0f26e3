"""`llmd tune --release NAME`: the recommended engine args recorded as an immutable release
(llmd.releases), the config's engine table with its args replaced by the recommendation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from llmd.config import EngineConfig
from llmd.errors import ReleaseError
from llmd.releases.record import Release
from llmd.releases.store import ReleaseStore, create_release


def check_release(state_dir: Path, name: str) -> None:
    """Refuse a release name that is invalid or taken before any engine boots. Raises
    `ReleaseError`."""
    store = ReleaseStore(state_dir)
    if store.exists(name):  # store.path() checks the name first
        raise ReleaseError(
            f"release {name!r} exists ({store.path(name)}); releases are immutable: choose "
            "another name for the tuned args"
        )


def record_release(
    state_dir: Path, name: str, engine_name: str, engine: EngineConfig, args: tuple[str, ...]
) -> tuple[Release, Path]:
    """Store release `name` of engine `engine_name` (its table `engine`) with `args` as its
    engine args; the release and where it was written. Raises `ReleaseError` (a taken name, an
    unwritable state directory)."""
    try:
        import pynvml as nvml
    except ImportError:
        nvml = None
    store = ReleaseStore(state_dir)
    tuned = dataclasses.replace(engine, args=args)
    release, _ = create_release(store, name, engine_name, tuned, nvml)
    return release, store.path(name)
