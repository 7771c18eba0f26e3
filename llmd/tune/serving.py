"""What a running llmd does while `llmd tune` boots an engine beside it: the daemon's engines on
the tuned engine's GPUs must take no requests (drained by the operator, or by tune with
`--sharing drain`), those on other GPUs serve on. A socket tune cannot read is no proof that no
llmd serves: that is a refusal too."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from llmd.admin.client import AdminForbidden, AdminUnreachable, admin_request, socket_group
from llmd.config import EngineConfig
from llmd.errors import TuneError
from llmd.runtime import RuntimePaths

T = TypeVar("T")

# How long tune waits for a daemon's status before taking its silence as "llmd is there".
ADMIN_TIMEOUT_S = 5.0
# How often tune reads the status while engines it drained finish their requests.
POLL_S = 0.5
_WAY_OUT = "Stop llmd (systemctl stop llmd), or point --runtime-dir at the one it uses."

Sharing = Literal["keep", "drain"]


@dataclasses.dataclass(frozen=True)
class Beside:
    """How tune runs beside a daemon: the engines it drains for the run (`--sharing drain`),
    and those on the tuned engine's GPUs that keep serving (`--sharing keep`)."""

    drain: tuple[str, ...] = ()
    sharing: tuple[str, ...] = ()


def daemon_status(runtime_dir: Path) -> dict[str, Any] | None:
    """The status of the llmd serving in `runtime_dir`, None when none can be (no admin socket,
    or one nobody listens on, left by a killed llmd). Raises `TuneError` when a socket is
    listened on but gives no status: it denies this user, answers an error, or says nothing
    in ADMIN_TIMEOUT_S; the message says what was found and how to go on."""
    admin = RuntimePaths(runtime_dir).admin_socket
    if not _listened_on(admin):
        return None
    try:
        status: dict[str, Any] = asyncio.run(
            admin_request(admin, "GET", "/status", timeout_s=ADMIN_TIMEOUT_S)
        )
    except Exception as exc:  # anything but a status: something serves there, unread
        unreachable = isinstance(exc, AdminUnreachable) and not isinstance(exc, AdminForbidden)
        detail = f"no answer in {ADMIN_TIMEOUT_S:g} s" if unreachable else str(exc)
        raise TuneError(
            f"the admin socket {admin} is listened on, but gave no status ({detail}): llmd may "
            f"be serving there, and tune must not share the GPU with it. {_WAY_OUT}"
        ) from None
    return status


def plan_beside(
    status: Mapping[str, Any],
    name: str,
    engines: Mapping[str, EngineConfig],
    sharing: Sharing,
    runtime_dir: Path,
) -> Beside:
    """Which of the daemon's engines (`status`) tune drains, and which share the GPUs of engine
    `name` (configured in `engines`) and serve on. The daemon's own `name` and the engines on
    its GPUs share them; an engine the config does not know is taken to share them. With
    `sharing` "drain" tune drains them all; with "keep" the daemon's `name` must already be
    drained with nothing in flight (the operator's `llmd drain --engine NAME --wait`) and the
    others serve on. Raises `TuneError` naming the commands when `name` still serves."""
    tuned = engines[name]
    running = [e for e in status.get("engines", []) if e.get("kind", "engine") == "engine"]
    on_its_gpus = [
        e for e in running if e["name"] == name or _share_gpus(tuned, engines.get(e["name"]))
    ]
    if sharing == "drain":
        return Beside(drain=tuple(e["name"] for e in on_its_gpus))
    mine = next((e for e in on_its_gpus if e["name"] == name), None)
    if mine is not None:
        drained = bool(mine.get("draining") or status.get("draining"))
        if not drained or mine.get("in_flight"):
            state = f"{mine.get('state', '?')}, {mine.get('in_flight', 0)} in flight"
            raise TuneError(
                f"llmd serves engine {name} on {RuntimePaths(runtime_dir).admin_socket} "
                f"({state}): tune boots its own copy of it. Drain it first (llmd drain --engine "
                f"{name} --wait --runtime-dir {runtime_dir}), pass --sharing drain to have tune "
                "drain it and the engines on its GPUs for the run, or stop llmd"
            )
    return Beside(sharing=tuple(e["name"] for e in on_its_gpus if e["name"] != name))


def _share_gpus(tuned: EngineConfig, other: EngineConfig | None) -> bool:
    """Whether `other` may use a GPU `tuned` uses: always for an engine the config does not
    know; never for a simulator, which uses none."""
    if other is None:
        return True
    if "sim" in (tuned.kind, other.kind):
        return False
    return bool(set(tuned.devices) & set(other.devices))


@contextlib.contextmanager
def drained_for_tune(runtime_dir: Path, names: tuple[str, ...], timeout_s: float) -> Iterator[None]:
    """Drain engines `names` of the llmd on `runtime_dir` for the block, once the requests
    running there have finished (at most `timeout_s`), and resume them after it, whatever
    happens inside. Engines an operator had drained before stay drained. Raises `TuneError`
    when the daemon refuses or requests are still running after `timeout_s` (resumed then)."""
    admin = RuntimePaths(runtime_dir).admin_socket
    before = _call(admin, "GET", "/status")
    already = {e["name"] for e in before.get("engines", []) if e.get("draining")}
    drained = [name for name in names if name not in already]
    try:
        for name in drained:
            _call(admin, "POST", "/drain", {"engine": name})
        _wait_idle(admin, names, timeout_s)
        yield
    finally:
        for name in drained:
            with contextlib.suppress(TuneError):
                _call(admin, "POST", "/resume", {"engine": name})


def _wait_idle(admin: Path, names: tuple[str, ...], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        engines = _call(admin, "GET", "/status").get("engines", [])
        busy = {e["name"]: e["in_flight"] for e in engines if e["name"] in names and e["in_flight"]}
        if not busy:
            return
        if time.monotonic() >= deadline:
            left = ", ".join(f"{name} ({count} in flight)" for name, count in busy.items())
            raise TuneError(
                f"engines still busy after {timeout_s:g} s of drain: {left}; try again, or end "
                "their requests with a deadline (llmd drain --engine NAME --timeout S)"
            )
        time.sleep(POLL_S)


def _call(admin: Path, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One admin call for the drain. Raises `TuneError` with the client's words."""
    try:
        return asyncio.run(admin_request(admin, method, path, body, timeout_s=ADMIN_TIMEOUT_S))
    except Exception as exc:
        raise TuneError(f"llmd on {admin}: {method} {path}: {exc}") from None


def _listened_on(path: Path) -> bool:
    """Whether a process listens on Unix socket `path`: False when there is no socket or it
    refuses connections (no one listens). Raises TuneError when this user may not connect."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(ADMIN_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except PermissionError as exc:
        raise TuneError(
            f"the admin socket {path} exists but this user may not open it ({exc.strerror}): "
            "llmd may be serving there, and tune must not share the GPU with it. Run tune as "
            f"root or as a user of the socket's group ({socket_group(path)}), or stop llmd "
            "(systemctl stop llmd)."
        ) from None
    except OSError as exc:
        raise TuneError(
            f"the admin socket {path} exists but cannot be reached ({exc.strerror or exc}): "
            f"llmd may be serving there, and tune must not share the GPU with it. {_WAY_OUT}"
        ) from None
    finally:
        probe.close()
    return True


def beside_llmd(config: Any, engine: str, args: argparse.Namespace, run: Callable[[], T]) -> T:
    """`run()`, with the engines of an llmd serving on the runtime directory that share
    `engine`'s GPUs drained or serving on, as --sharing says. Raises `TuneError`."""
    runtime_dir = Path(args.runtime_dir or config.server.runtime_dir)
    status = daemon_status(runtime_dir)
    if status is None:
        return run()
    beside = plan_beside(status, engine, config.engine_tables, args.sharing, runtime_dir)
    if beside.sharing:
        print(
            f"llmd tune: engines {', '.join(beside.sharing)} serve on beside the tuned engine, "
            "on its GPUs: the figures include their load (--sharing drain drains them)",
            file=sys.stderr,
        )
    drain_timeout_s = config.server.drain_timeout_s
    with drained_for_tune(runtime_dir, beside.drain, drain_timeout_s):
        return run()
