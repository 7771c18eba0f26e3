"""SHA-256 of a model's files, cached by file identity in the state directory so that a 15 GB
model is read once, not at every `llmd release create`.

A file's identity is (device, inode, size, mtime_ns, ctime_ns). ctime is in the key besides
what a copy tool can restore (size and mtime): any write, rename onto the path, chmod or utime
moves it, and nothing but the kernel sets it, so a file rewritten in place with its old size
and mtime put back is still hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from llmd.releases.atomic import locked, write_atomic

CACHE_VERSION = 1
_CHUNK = 1 << 20


def file_identity(path: Path) -> str:
    """`device:inode:size:mtime_ns:ctime_ns` of `path` (symlinks followed). Raises OSError."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of the file's bytes, read in 1 MiB chunks. Raises OSError."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class DigestCache:
    """Digests by file identity, loaded from and merged back into one JSON file.

    `files_hashed` and `bytes_hashed` count what this instance had to read (cache misses).
    Each entry keeps the path it was computed for, so `prune` can drop the entries of files no
    kept release names.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, dict[str, str]] = _read_entries(path)
        self._new: dict[str, dict[str, str]] = {}
        self.files_hashed = 0
        self.bytes_hashed = 0

    def digest(self, file: Path) -> str:
        """The SHA-256 of `file`: from the cache when its identity is known, else read once.
        Raises OSError when the file cannot be read."""
        identity = file_identity(file)
        entry = self._new.get(identity) or self._entries.get(identity)
        if entry is not None:
            return entry["sha256"]
        value = sha256_file(file)
        # A file that changed while it was read would be cached under a stale identity.
        if file_identity(file) == identity:
            self._new[identity] = {"sha256": value, "path": str(file)}
        self.files_hashed += 1
        self.bytes_hashed += file.stat().st_size
        return value

    def save(self) -> None:
        """Merge this instance's new digests into the cache file (under the state lock, so
        that concurrent creates lose nothing). Raises OSError."""
        if not self._new:
            return
        with locked(_lock_path(self.path)):
            entries = {**_read_entries(self.path), **self._new}
            write_atomic(self.path, _encode(entries))
        self._entries.update(self._new)
        self._new = {}

    def prune(self, keep_paths: set[str]) -> int:
        """Drop the entries whose path is not in `keep_paths`, and entries of files that changed
        since (their identity no longer matches); the number removed. The caller holds the
        state lock. Raises OSError."""
        entries = _read_entries(self.path)
        kept = {
            identity: entry
            for identity, entry in entries.items()
            if entry["path"] in keep_paths and _still(identity, entry["path"])
        }
        if len(kept) != len(entries):
            write_atomic(self.path, _encode(kept))
        self._entries = kept
        return len(entries) - len(kept)


def _still(identity: str, path: str) -> bool:
    try:
        return file_identity(Path(path)) == identity
    except OSError:
        return False


def _lock_path(cache_path: Path) -> Path:
    return cache_path.parent / ".lock"


def _read_entries(path: Path) -> dict[str, dict[str, str]]:
    """The cache's entries; an unreadable or foreign file counts as empty (it is only a cache)."""
    try:
        raw: Any = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("version") != CACHE_VERSION:
        return {}
    entries = raw.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {
        key: value
        for key, value in entries.items()
        if isinstance(value, dict)
        and isinstance(value.get("sha256"), str)
        and isinstance(value.get("path"), str)
    }


def _encode(entries: dict[str, dict[str, str]]) -> bytes:
    return json.dumps({"version": CACHE_VERSION, "entries": entries}, sort_keys=True).encode()
