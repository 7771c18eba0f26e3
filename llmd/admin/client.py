"""The admin API client (no widgets): used by the CLI verbs, `llmd tune` and llmd-top. Its errors
say in llmd's words what happened and what to do next, never the transport's."""

from __future__ import annotations

import grp
import json
from pathlib import Path
from typing import Any

from llmd.console import import_structlog
from llmd.engine.connection import ConnectFailed, WireError
from llmd.quoting import printable

# Every user of this client (the CLI verbs, `llmd tenant`, `llmd doctor`, `llmd tune`,
# llmd-top) starts faster with structlog, which the engine's client imports, without rich.
import_structlog()
from llmd.engine.wire import Pool  # noqa: E402


class AdminUnreachable(Exception):
    """No llmd answers on the admin socket: there is none, nobody listens on it, it gave no
    answer in time, or it closed the connection. The message says what to do next."""


class AdminForbidden(AdminUnreachable):
    """The admin socket is there but this user may not open it (not root, not in its group):
    unreachable for this user, which callers that only show the message need not tell apart."""


class AdminRefused(Exception):
    """The daemon answered with an error; the message is the daemon's."""


async def admin_request(
    socket: Path,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> Any:
    """Call the admin API at `socket` (`body` sent as JSON); the decoded JSON answer.

    Through llmd's own HTTP/1.1 client (llmd/engine/wire.py): aiohttp's import was about
    0.3 CPU-s of each CLI verb's 0.4 s. Raises AdminUnreachable when no daemon answers on
    `socket` within `timeout_s` seconds, AdminForbidden when this user may not open it,
    AdminRefused on an error answer (its message, `printable`) or an answer that is not JSON
    (the status and the start of the text).
    """
    pool = Pool(socket_path=socket, host="llmd")
    content = b"" if body is None else json.dumps(body).encode()
    headers = None if body is None else {"content-type": "application/json"}
    try:
        response = await pool.fetch(method, path, content, headers, timeout_s=timeout_s)
    except (WireError, TimeoutError) as exc:
        raise _translated(exc, socket, f"{method} {path}", timeout_s) from exc
    finally:
        pool.close()
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status >= 400 or answer is None:
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise AdminRefused(printable(error["message"]))
        text = response.text()
        raise AdminRefused(f"llmd answered {path} with HTTP {response.status}: {text[:200]!r}")
    return answer


def _translated(exc: BaseException, socket: Path, call: str, timeout_s: float) -> Exception:
    """The admin error, in llmd's words, for the client's `exc` on `call` ("METHOD /path") to
    `socket`: a failed connect (its cause the OS's error), a lost connection, or the time
    running out (for anything but a GET, the message says the request may still take
    effect)."""
    cause = exc.__cause__ if isinstance(exc, ConnectFailed) else exc
    if isinstance(cause, PermissionError):
        return AdminForbidden(
            f"this user may not open {socket} (permission denied): run as root or as a member "
            f"of its group ({socket_group(socket)})"
        )
    if isinstance(cause, TimeoutError):
        # A request sent may still be read and acted on (a stopped llmd that goes on, a busy
        # one): only a read (GET) is safe to repeat without looking first.
        then = (
            "try again"
            if call.startswith("GET ")
            else "the request may still take effect: see `llmd status` before trying again"
        )
        return AdminUnreachable(
            f"llmd on {socket} did not answer {call} within {timeout_s:g} s: it may be busy "
            f"or stuck; {then}, or see systemctl status llmd"
        )
    if isinstance(exc, ConnectFailed):
        return AdminUnreachable(
            f"no llmd answers on {socket}: is it running? (systemctl status llmd), "
            "or pass --runtime-dir"
        )
    return AdminUnreachable(
        f"the connection to llmd on {socket} broke during {call}: llmd may have stopped; "
        "see systemctl status llmd"
    )


def socket_group(path: Path) -> str:
    """The name of `path`'s group (`llmd` under the shipped unit), or its parent's when `path`
    cannot be examined either; '?' when neither can."""
    for candidate in (path, path.parent):
        try:
            gid = candidate.stat().st_gid
        except OSError:
            continue
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)
    return "?"
