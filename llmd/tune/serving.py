"""Whether an llmd daemon serves where `llmd tune` would boot its engine: tune must not share
the GPU with it, and a socket it cannot read is no proof that none serves."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from llmd.admin.client import AdminForbidden, AdminUnreachable, admin_request, socket_group
from llmd.errors import TuneError
from llmd.runtime import RuntimePaths

# How long tune waits for a daemon's status before taking its silence as "llmd is there".
ADMIN_TIMEOUT_S = 5.0
_WAY_OUT = "Stop llmd (systemctl stop llmd), or point --runtime-dir at the one it uses."


def refuse_if_serving(runtime_dir: Path, engine: str | None, name: str = "main") -> None:
    """Raise `TuneError` unless no llmd daemon can be serving in `runtime_dir` (no admin socket,
    or one nobody listens on, left by a killed llmd), or `engine` names its engine `name` and the
    daemon has drained it (draining, nothing in flight). A socket that exists but denies this
    user, answers with an error or answers nothing in ADMIN_TIMEOUT_S is a refusal too: the
    message says what was found and how to go on."""
    admin = RuntimePaths(runtime_dir).admin_socket
    if not _listened_on(admin):
        return
    try:
        status = asyncio.run(admin_request(admin, "GET", "/status", timeout_s=ADMIN_TIMEOUT_S))
        state = status["engine"]["state"]
    except Exception as exc:  # anything but a status: something serves there, unread
        unreachable = isinstance(exc, AdminUnreachable) and not isinstance(exc, AdminForbidden)
        detail = f"no answer in {ADMIN_TIMEOUT_S:g} s" if unreachable else str(exc)
        raise TuneError(
            f"the admin socket {admin} is listened on, but gave no status ({detail}): llmd may "
            f"be serving there, and tune must not share the GPU with it. {_WAY_OUT}"
        ) from None
    if engine is not None and status.get("draining") and not status.get("in_flight"):
        return
    raise TuneError(
        f"llmd serves on {admin} (engine {state}): tune boots its own "
        "engine and must not share the GPU with it. Stop llmd, or drain it "
        f"(llmd drain --wait --runtime-dir {runtime_dir}) and pass --engine {name}"
    )


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
