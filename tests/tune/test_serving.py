"""`llmd tune` beside a running llmd: no daemon where the admin socket is missing or dead; one
that denies this user, answers with an error or answers nothing is a refusal saying why. Which
of a daemon's engines tune drains or leaves serving (`plan_beside`), and the drain itself."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from llmd.config import EngineConfig
from llmd.errors import TuneError
from llmd.runtime import RuntimePaths
from llmd.tune import serving
from llmd.tune.serving import Beside, daemon_status, plan_beside
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
    assert daemon_status(runtime_dir) is None
    dead = listening(admin_socket(runtime_dir))
    dead.close()  # the file stays, nobody listens
    assert admin_socket(runtime_dir).exists()
    assert daemon_status(runtime_dir) is None


def test_a_socket_that_answers_nothing_is_a_refusal(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that takes the connection but sends no status in time: refused, not ignored."""
    monkeypatch.setattr(serving, "ADMIN_TIMEOUT_S", 0.5)
    with listening(admin_socket(runtime_dir)), pytest.raises(TuneError) as caught:
        daemon_status(runtime_dir)
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
        daemon_status(erring_daemon)


def test_a_socket_this_user_may_not_open_is_a_refusal(runtime_dir: Path) -> None:
    """The admin socket is there but denies this user (not in llmd's group): refused, saying
    to run as root or a user of the socket's group, or to stop llmd. Checked in a child that
    drops to `nobody` when the tests run as root (root passes every permission check)."""
    keep = listening(admin_socket(runtime_dir))
    runtime_dir.chmod(0o000 if os.geteuid() else 0o700)

    def refused() -> str:
        try:
            daemon_status(runtime_dir)
        except TuneError as exc:
            return str(exc)
        return "went ahead"

    message = as_nobody(refused)
    runtime_dir.chmod(0o700)
    keep.close()
    assert "exists but this user may not open it (Permission denied)" in message, message
    assert "Run tune as root or as a user of the socket's group (" in message
    assert "stop llmd" in message


def _status(*engines: dict[str, Any], draining: bool = False) -> dict[str, Any]:
    """A status snapshot with these `engines` entries (name, draining, in_flight, state)."""
    return {"draining": draining, "engines": [{"kind": "engine", **e} for e in engines]}


def _engine(*gpus: str) -> EngineConfig:
    return EngineConfig(model="/m", gpus=gpus)


# etc/llmd-multi.toml's engines: big on GPUs 0-1, small-a on 2, small-b and embed sharing 3.
MULTI = {
    "big": _engine("0", "1"),
    "small-a": _engine("2"),
    "small-b": _engine("3"),
    "embed": _engine("3"),
}
SERVING = {"state": "serving", "draining": False, "in_flight": 2}
DRAINED = {"state": "serving", "draining": True, "in_flight": 0}


def test_engines_on_other_gpus_serve_on_and_a_drained_copy_lets_tune_run() -> None:
    """Tuning small-a (GPU 2) beside a daemon whose small-a is drained and idle: nothing to
    drain, no engine shares its GPU; big and small-b serve on."""
    status = _status(
        {"name": "big", **SERVING}, {"name": "small-a", **DRAINED}, {"name": "small-b", **SERVING}
    )
    beside = plan_beside(status, "small-a", MULTI, "keep", Path("/run/llmd"))
    assert beside == Beside(drain=(), sharing=())


def test_the_daemons_copy_still_serving_is_refused_with_the_commands() -> None:
    """The daemon's own copy of the tuned engine takes requests: refused, naming the drain
    command for it and --sharing drain."""
    status = _status({"name": "small-a", **SERVING})
    with pytest.raises(TuneError) as caught:
        plan_beside(status, "small-a", MULTI, "keep", Path("/run/llmd"))
    message = str(caught.value)
    assert "llmd serves engine small-a on /run/llmd/admin.sock (serving, 2 in flight)" in message
    assert "llmd drain --engine small-a --wait --runtime-dir /run/llmd" in message
    assert "--sharing drain" in message


def test_a_drained_llmd_counts_as_the_engine_drained() -> None:
    """`llmd drain --wait` (all of llmd) drains the tuned engine too: tune runs."""
    status = _status({"name": "main", **SERVING, "in_flight": 0}, draining=True)
    assert plan_beside(status, "main", {"main": _engine()}, "keep", Path("/r")) == Beside()


def test_engines_sharing_the_gpu_serve_on_or_are_drained_as_asked() -> None:
    """small-b's GPU 3 is embed's too: with keep, embed serves on (and is named); with drain,
    tune drains both, and never big on GPUs 0-1. An engine the config does not know is taken
    to share the GPU; a simulator shares none."""
    status = _status(
        {"name": "big", **SERVING},
        {"name": "small-b", **DRAINED},
        {"name": "embed", **SERVING},
        {"name": "unknown", **SERVING},
    )
    keep = plan_beside(status, "small-b", MULTI, "keep", Path("/r"))
    assert keep == Beside(drain=(), sharing=("embed", "unknown"))
    drain = plan_beside(status, "small-b", MULTI, "drain", Path("/r"))
    assert drain == Beside(drain=("small-b", "embed", "unknown"), sharing=())
    sims = {"a": EngineConfig(kind="sim", model="/m"), "b": EngineConfig(kind="sim", model="/m")}
    status = _status({"name": "a", **SERVING}, {"name": "b", **SERVING})
    assert plan_beside(status, "a", sims, "drain", Path("/r")) == Beside(drain=("a",))
