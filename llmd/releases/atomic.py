"""Files in the state directory written whole or not at all, owned as their directory is, and
one lock for the writers."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path` and fsync
    the directory: a reader sees the old content or the new, never a part.

    Raises OSError (the temporary file is removed).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        adopt_owner(Path(tmp))
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_directory(path.parent)


def adopt_owner(path: Path) -> None:
    """Run as root, give `path` the owner and group of its directory: `sudo llmd release
    create` then leaves files the daemon's user (systemd's `User=llmd`, owner of the state
    directory) can read and append to. Otherwise a no-op. Raises OSError."""
    if os.geteuid() != 0:
        return
    parent = os.stat(path.parent)
    if (parent.st_uid, parent.st_gid) != (0, 0):
        os.chown(path, parent.st_uid, parent.st_gid)


def sync_directory(directory: Path) -> None:
    """fsync a directory so that a rename or unlink in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` (created if missing) for the block: one writer at a
    time among llmd processes (the daemon, CLI verbs). Raises OSError."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        adopt_owner(lock_path)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
