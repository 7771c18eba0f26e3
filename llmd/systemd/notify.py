"""sd_notify(3) without libsystemd: newline-separated KEY=VALUE datagrams to $NOTIFY_SOCKET.

A path starting with '@' is an abstract socket (its first byte becomes NUL), as sd_notify does.
Without $NOTIFY_SOCKET (not under systemd, Type=notify) every call is a no-op.
"""

from __future__ import annotations

import os
import socket

from llmd.numerals import ascii_int


class Notifier:
    """Sends state to the service manager. `enabled` is False when not run by systemd."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self._watchdog_usec = _watchdog_usec(env)
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    @property
    def watchdog_interval_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WatchdogSec, as sd_watchdog_enabled
        suggests), or None when the watchdog is off or meant for another process."""
        return self._watchdog_usec / 2e6 if self._watchdog_usec else None

    def notify(self, **fields: str | int) -> None:
        """Send `fields` as one message, e.g. notify(READY=1, STATUS="serving").

        Send errors are ignored, as sd_notify(3) returns them unseen by most callers: a missing
        service manager must never take the service down.
        """
        if not self._address:
            return
        message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message, self._address)
        except OSError:
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_usec(env: dict[str, str] | os._Environ[str]) -> int:
    pid = ascii_int(env.get("WATCHDOG_PID", ""))
    if pid is not None and pid != os.getpid():
        return 0
    return ascii_int(env.get("WATCHDOG_USEC", "")) or 0
