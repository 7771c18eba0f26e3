"""scripts/bench_ceiling.py's start: it measures once each relay helper listens, however long
that takes, and stops at once when a helper dies."""

from __future__ import annotations

import importlib.util
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_ceiling.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_ceiling_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bound() -> Iterator[tuple[socket.socket, int]]:
    """A socket bound to a port on 127.0.0.1 that does not listen yet (connections refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock, sock.getsockname()[1]


class Helper:
    """A helper process as `wait_listening` sees it: `poll()` runs `on_poll` (with the number
    of polls so far) and answers its exit status (None: running)."""

    def __init__(self, on_poll: Callable[[int], int | None]) -> None:
        self.polls = 0
        self.on_poll = on_poll

    def poll(self) -> int | None:
        self.polls += 1
        return self.on_poll(self.polls)


def test_waits_until_the_helper_listens(
    script: ModuleType, bound: tuple[socket.socket, int]
) -> None:
    """A helper that listens only after several looks is waited for, not given up on."""
    sock, port = bound

    def listen_late(polls: int) -> None:
        if polls == 5:
            sock.listen()

    helper = Helper(listen_late)
    script.wait_listening(port, helper, timeout_s=30)
    assert helper.polls == 5


def test_a_helper_that_exits_is_reported_at_once(
    script: ModuleType, bound: tuple[socket.socket, int]
) -> None:
    """A helper that died before it listened ends the wait with its exit status."""
    _, port = bound
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exited \(1\)"):
        script.wait_listening(port, Helper(lambda polls: 1), timeout_s=30)
    assert time.monotonic() - started < 5


def test_the_wait_is_bounded(script: ModuleType, bound: tuple[socket.socket, int]) -> None:
    """A helper that never listens ends the wait after its timeout."""
    _, port = bound
    with pytest.raises(RuntimeError, match="nothing listens"):
        script.wait_listening(port, Helper(lambda polls: None), timeout_s=0.2)
