"""Run a check as a user without llmd's rights: `nobody` when the tests run as root (root passes
every permission check), this user otherwise."""

from __future__ import annotations

import os
from collections.abc import Callable

NOBODY = 65534


def as_nobody(action: Callable[[], str]) -> str:
    """Run `action` in a forked child that drops to `nobody` first when this process is root;
    what it returned, or the exception it raised as 'TypeName: message'.

    The child reads files as `nobody`, and a Python installed where `nobody` may not read
    (pyenv under /root, as here) cannot import a module then: the caller imports what
    `action` needs first (whether earlier tests did must not decide a test's outcome)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - reports through the pipe
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            message = action()
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(child, 0)
    return message
