"""`llmd tune` goes ahead only where no llmd can be serving: a missing or dead admin socket. One
that denies this user, answers with an error or answers nothing is a refusal saying why."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from llmd.errors import TuneError
from llmd.runtime import RuntimePaths
from llmd.tune import serving
from llmd.tune.serving import refuse_if_serving
from tests.support.llmd_process import short_tmpdir
from tests.support.users import as_nobody


@pytest.fixture
def runtime_dir() -> Path:
    return short_tmpdir("llmd-tune-")


def admin_socket(runtime_dir: Path) -> Path:
    return RuntimePaths(runtime_dir).admin_socket


def listening(path: Path) -> socket.socket:
    """A Unix socket at `path` that accepts connections and never answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def test_no_socket_or_a_dead_one_lets_tune_run(runtime_dir: Path) -> None:
    """No admin socket, or one left by a killed llmd (nobody listens): no daemon, tune runs."""
    refuse_if_serving(runtime_dir, None)
    dead = listening(admin_socket(runtime_dir))
    dead.close()  # the file stays, nobody listens
    assert admin_socket(runtime_dir).exists()
    refuse_if_serving(runtime_dir, None)


def test_a_socket_that_answers_nothing_is_a_refusal(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that takes the connection but sends no status in time: refused, not ignored."""
    monkeypatch.setattr(serving, "ADMIN_TIMEOUT_S", 0.5)
    with listening(admin_socket(runtime_dir)), pytest.raises(TuneError) as caught:
        refuse_if_serving(runtime_dir, None)
    assert "gave no status (no answer in 0.5 s)" in str(caught.value)
    assert "systemctl stop llmd" in str(caught.value)


@pytest.fixture
def erring_daemon(runtime_dir: Path) -> Iterator[Path]:
    """An admin API on the runtime directory's socket that answers /status with a 500."""
    started = threading.Event()
    loop = asyncio.new_event_loop()

    async def fail(request: web.Request) -> web.Response:
        body = {"error": {"message": "status is broken", "type": "x", "param": None, "code": 1}}
        return web.json_response(body, status=500)

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/status", fail)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.UnixSite(runner, str(admin_socket(runtime_dir))).start()
        return runner

    runner = loop.run_until_complete(serve())
    thread = threading.Thread(target=lambda: (started.set(), loop.run_forever()), daemon=True)
    thread.start()
    started.wait()
    try:
        yield runtime_dir
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_socket_that_answers_an_error_is_a_refusal(erring_daemon: Path) -> None:
    """A daemon that answers /status with an error is still a daemon: refused, with its words."""
    with pytest.raises(TuneError, match=r"gave no status \(status is broken\)"):
        refuse_if_serving(erring_daemon, None)


def test_a_socket_this_user_may_not_open_is_a_refusal(runtime_dir: Path) -> None:
    """The admin socket is there but denies this user (not in llmd's group): refused, saying
    to run as root or a user of the socket's group, or to stop llmd. Checked in a child that
    drops to `nobody` when the tests run as root (root passes every permission check)."""
    keep = listening(admin_socket(runtime_dir))
    runtime_dir.chmod(0o000 if os.geteuid() else 0o700)

    def refused() -> str:
        try:
            refuse_if_serving(runtime_dir, None)
        except TuneError as exc:
            return str(exc)
        return "went ahead"

    message = as_nobody(refused)
    runtime_dir.chmod(0o700)
    keep.close()
    assert "exists but this user may not open it (Permission denied)" in message, message
    assert "Run tune as root or as a user of the socket's group (" in message
    assert "stop llmd" in message
