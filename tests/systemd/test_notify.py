"""sd_notify over a real AF_UNIX datagram socket, path and abstract addresses."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from llmd.systemd.notify import Notifier


def test_sends_newline_separated_fields_to_a_path_socket(tmp_path: Path) -> None:
    """notify(READY=1, STATUS=...) arrives as one datagram 'READY=1\\nSTATUS=...'."""
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        notifier = Notifier({"NOTIFY_SOCKET": path})
        notifier.notify(READY=1, STATUS="serving tiny")
        assert server.recv(4096) == b"READY=1\nSTATUS=serving tiny"
        notifier.close()


def test_abstract_socket_address() -> None:
    """'@name' is the abstract address NUL+name, as sd_notify(3) reads it."""
    name = f"llmd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        notifier = Notifier({"NOTIFY_SOCKET": "@" + name})
        notifier.notify(STOPPING=1)
        assert server.recv(4096) == b"STOPPING=1"
        notifier.close()


def test_without_systemd_everything_is_a_no_op() -> None:
    """No NOTIFY_SOCKET: disabled, no watchdog, notify does nothing."""
    notifier = Notifier({})
    assert not notifier.enabled and notifier.watchdog_interval_s is None
    notifier.notify(READY=1)


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process() -> None:
    """WATCHDOG_USEC=30s → ping every 15 s; a WATCHDOG_PID of another process disables it."""
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000"}
    assert Notifier(env).watchdog_interval_s == 15.0
    assert Notifier({**env, "WATCHDOG_PID": str(os.getpid())}).watchdog_interval_s == 15.0
    assert Notifier({**env, "WATCHDOG_PID": "1"}).watchdog_interval_s is None


def test_send_errors_never_raise(tmp_path: Path) -> None:
    """A manager that went away must not take llmd down."""
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    notifier.notify(READY=1)
    notifier.close()
