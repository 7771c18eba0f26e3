"""File digests: read once, cached by file identity in the state directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from llmd.releases.digests import DigestCache, sha256_file
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml, engine


def test_a_second_release_of_the_same_files_reads_none_of_them(
    store: ReleaseStore, model_dir: Path
) -> None:
    """The first create reads every pinned file; the second reads nothing."""
    _, first = create_release(store, "r1", "main", engine(model_dir), NoNvml())
    assert first.files_hashed == 6
    assert first.bytes_hashed >= (model_dir / "model.safetensors").stat().st_size
    _, second = create_release(store, "r2", "main", engine(model_dir), NoNvml())
    assert second.files_hashed == 0 and second.bytes_hashed == 0
    assert store.get("r1").files == store.get("r2").files


def test_a_touched_file_is_read_again_and_only_it(store: ReleaseStore, model_dir: Path) -> None:
    """A new mtime changes the identity: that one file is hashed again."""
    create_release(store, "r1", "main", engine(model_dir), NoNvml())
    weights = model_dir / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    _, cache = create_release(store, "r2", "main", engine(model_dir), NoNvml())
    assert cache.files_hashed == 1


def test_a_file_rewritten_in_place_with_its_old_mtime_is_still_read_again(
    store: ReleaseStore, model_dir: Path
) -> None:
    """Same inode, size and mtime, other bytes: ctime moved, so the new digest is recorded."""
    release, _ = create_release(store, "r1", "main", engine(model_dir), NoNvml())
    config = model_dir / "generation_config.json"
    stat = config.stat()
    text = config.read_bytes()
    changed = text.replace(b'"pad_token_id": 3', b'"pad_token_id": 2')
    assert changed != text and len(changed) == len(text)
    with config.open("r+b") as handle:
        handle.write(changed)
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert config.stat().st_ino == stat.st_ino and config.stat().st_mtime_ns == stat.st_mtime_ns
    again, cache = create_release(store, "r2", "main", engine(model_dir), NoNvml())
    assert cache.files_hashed == 1
    digest = again.files.generation_config["generation_config.json"]
    assert (
        digest == sha256_file(config) != release.files.generation_config["generation_config.json"]
    )


def test_concurrent_saves_lose_no_digest(tmp_path: Path) -> None:
    """Two caches hashing different files and saving at once: both entries are kept."""
    path = tmp_path / "cache.json"
    files = []
    for name in ("a", "b"):
        (tmp_path / name).write_text(name * 1000)
        files.append(tmp_path / name)
    caches = [DigestCache(path), DigestCache(path)]
    for cache, file in zip(caches, files, strict=True):
        cache.digest(file)
    threads = [threading.Thread(target=cache.save) for cache in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fresh = DigestCache(path)
    for file in files:
        fresh.digest(file)
    assert fresh.files_hashed == 0


def test_a_corrupt_cache_is_only_a_cache(tmp_path: Path) -> None:
    """Garbage in the cache file: files are hashed again, nothing fails."""
    path = tmp_path / "cache.json"
    path.write_text("{not json")
    (tmp_path / "f").write_text("x")
    cache = DigestCache(path)
    assert cache.digest(tmp_path / "f") == sha256_file(tmp_path / "f")
    cache.save()
    assert DigestCache(path).digest(tmp_path / "f") == sha256_file(tmp_path / "f")


def test_prune_keeps_the_named_files_and_drops_the_rest(tmp_path: Path) -> None:
    """Entries of files no kept release names, or that changed since, are dropped."""
    path = tmp_path / "cache.json"
    for name in ("keep", "drop", "changed"):
        (tmp_path / name).write_text(name)
    cache = DigestCache(path)
    for name in ("keep", "drop", "changed"):
        cache.digest(tmp_path / name)
    cache.save()
    (tmp_path / "changed").write_text("changed again")
    keep = {str(tmp_path / "keep"), str(tmp_path / "changed")}
    assert DigestCache(path).prune(keep) == 2
    fresh = DigestCache(path)
    fresh.digest(tmp_path / "keep")
    assert fresh.files_hashed == 0
    fresh.digest(tmp_path / "drop")
    assert fresh.files_hashed == 1
