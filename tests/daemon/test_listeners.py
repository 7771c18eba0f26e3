"""The daemon's listening sockets."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


def test_a_port_in_use_is_named_with_the_key_that_sets_it() -> None:
    """`llmd serve` on a port in use exits 1 saying which address and how to choose another
    (it said only "[Errno 98] Address already in use"), without Python's "[Errno 98]"."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        workdir = short_tmpdir("llmd-port-")
        config = workdir / "llmd.toml"
        config.write_text(sim_config(ensure_tiny_model()))
        done = subprocess.run(
            [
                *(sys.executable, "-m", "llmd.cli", "serve", "--config", str(config)),
                *("--listen", f"127.0.0.1:{port}", "--runtime-dir", str(workdir / "run")),
                *("--state-dir", str(workdir / "state")),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 1
    assert (
        f"llmd: cannot start: cannot listen on 127.0.0.1:{port}: Address already in "
        "use; choose another address with server.listen in the config or --listen HOST:PORT"
    ) in done.stderr
