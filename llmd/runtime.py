"""The runtime directory's layout (the admin and engine sockets side by side, each engine's pid
file and the directory of its internal sockets), and the lock that keeps it to one llmd at a
time."""

from __future__ import annotations

import dataclasses
import fcntl
import os
from pathlib import Path

from llmd.config.backends import MAIN
from llmd.errors import RuntimeDirInUse


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

    def create(self) -> None:
        """Create the directory (mode 0750) if it is missing. Raises OSError if it cannot."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True)
            os.chmod(self.root, 0o750)


def _stem(engine: str) -> str:
    return "engine" if engine == MAIN else f"engine-{engine}"
