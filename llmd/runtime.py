"""The runtime directory's layout: the admin socket and the engine socket live side by side."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


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
        """The engine's Unix socket (vLLM `--uds`)."""
        return self.root / "engine.sock"

    def create(self) -> None:
        """Create the directory (mode 0750) if it is missing. Raises OSError if it cannot."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True)
            os.chmod(self.root, 0o750)
