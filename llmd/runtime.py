"""The runtime directory's layout (the admin and engine sockets side by side, each engine's pid
file and the directory of its internal sockets), and the lock that keeps it to one llmd at a
time."""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from llmd.config.backends import MAIN
from llmd.errors import ConfigError, RuntimeDirInUse

# The longest path a Unix socket may bind to: sun_path holds 108 bytes on Linux, the last one
# the terminating NUL (unix(7)). A longer one fails at bind with "AF_UNIX path too long".
MAX_SOCKET_PATH_BYTES = 107


@dataclasses.dataclass(frozen=True)
class RuntimePaths:
    """Paths under llmd's runtime directory (default /run/llmd, systemd's RuntimeDirectory)."""

    root: Path

    @property
    def admin_socket(self) -> Path:
        """The admin API's Unix socket (mode 0660: root and the llmd group)."""
        return self.root / "admin.sock"

    @property
    def engine_socket(self) -> Path:
        """The `main` engine's Unix socket (vLLM `--uds`)."""
        return self.socket_of(MAIN)

    @property
    def engine_pid_file(self) -> Path:
        """The `main` engine's pid file (`pid_file_of`)."""
        return self.pid_file_of(MAIN)

    def socket_of(self, engine: str) -> Path:
        """Engine `engine`'s Unix socket: `engine.sock` for `main` (as with one engine),
        `engine-NAME.sock` for the others."""
        return self.root / f"{_stem(engine)}.sock"

    def pid_file_of(self, engine: str) -> Path:
        """Engine `engine`'s process group and start time while it runs
        (llmd.supervisor.leftovers): `engine.pid` for `main`, `engine-NAME.pid` for others."""
        return self.root / f"{_stem(engine)}.pid"

    def rpc_dir_of(self, engine: str) -> Path:
        """The directory where engine `engine`'s vLLM binds its internal ZMQ sockets
        (VLLM_RPC_BASE_PATH; vLLM 0.32 `network_utils.get_open_zmq_ipc_path` names each
        `BASE/<uuid4>` and defaults BASE to /tmp, where they are left behind), emptied by llmd
        at each spawn and stop: `engine.rpc` for `main`, `engine-NAME.rpc` for others."""
        return self.root / f"{_stem(engine)}.rpc"

    def pid_files(self) -> list[Path]:
        """Every engine pid file in the directory (`pid_file_of` of any name: regular files
        named `engine.pid` or `engine-NAME.pid`), in name order: a killed llmd's, whatever
        engines it ran."""
        named = [self.root / "engine.pid", *self.root.glob("engine-*.pid")]
        return sorted(path for path in named if path.is_file())

    @staticmethod
    def engine_of(pid_file: Path) -> str:
        """The engine whose pid file is `pid_file` (`pid_file_of`'s inverse)."""
        stem = pid_file.stem
        return MAIN if stem == "engine" else stem.removeprefix("engine-")

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the llmd that uses this directory, for as long as it runs."""
        return self.root / "llmd.lock"

    def claim(self) -> int:
        """Take the directory for this llmd: an exclusive flock on `lock_file`, held until the
        returned descriptor is closed (or the process dies, however it dies). Raises
        RuntimeDirInUse when another llmd holds it."""
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RuntimeDirInUse(
                f"another llmd (pid {holder}) uses the runtime directory {self.root}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def sockets(self, engines: Iterable[str]) -> list[Path]:
        """The Unix sockets bound in the directory: the admin socket and each of `engines`'."""
        return [self.admin_socket, *(self.socket_of(engine) for engine in engines)]

    def check_socket_paths(self, engines: Iterable[str], key: str) -> None:
        """Raises ConfigError naming `key` (where the directory was given), the longest socket
        path of `sockets(engines)` and MAX_SOCKET_PATH_BYTES when that path is longer."""
        longest = max(self.sockets(engines), key=lambda path: len(os.fsencode(path)))
        length = len(os.fsencode(longest))
        if length > MAX_SOCKET_PATH_BYTES:
            raise ConfigError(
                f"{key} = {str(self.root)!r}: the socket {longest} is {length} bytes, over the "
                f"{MAX_SOCKET_PATH_BYTES} a Unix socket's path may have: choose a shorter "
                "directory",
                key=key,
            )

    def create(self) -> None:
        """Create the directory (mode 0750) if it is missing. Raises NotADirectoryError when
        something else has its name, OSError if it cannot be created."""
        if not self.root.is_dir():
            refuse_non_directory(self.root)
            self.root.mkdir(parents=True)
            os.chmod(self.root, 0o750)


def refuse_non_directory(path: Path) -> None:
    """Raises NotADirectoryError (ENOTDIR, naming `path`) when `path` exists and is not a
    directory (a regular file given as --runtime-dir or --state-dir)."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def check_writable(directory: Path) -> None:
    """Create `directory` if it is missing and write a file in it, then remove it: what
    `llmd serve` checks of its state directory at start, so a directory it may not write is
    refused then, not at the first request. Raises OSError (PermissionError, EROFS on a
    read-only mount, NotADirectoryError) naming the path."""
    refuse_non_directory(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o750)
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".llmd-write-check-"):
            pass
    except OSError as exc:  # named by the directory, not the file it tried
        raise type(exc)(exc.errno, exc.strerror, str(directory)) from None


def _stem(engine: str) -> str:
    return "engine" if engine == MAIN else f"engine-{engine}"
