"""The admin API client (no widgets): used by the CLI verbs and by llmd-top."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp


class AdminUnreachable(Exception):
    """The daemon's admin socket is missing or refused the connection."""


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

    Raises AdminUnreachable when no daemon answers on `socket`, AdminRefused on an error answer
    (its message) or an answer that is not JSON (the status and the start of the text).
    """
    connector = aiohttp.UnixConnector(path=str(socket))
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.request(method, "http://llmd" + path, json=body, timeout=timeout) as response,
        ):
            text = await response.text(errors="replace")
    except (aiohttp.ClientConnectionError, FileNotFoundError, PermissionError) as exc:
        raise AdminUnreachable(f"no llmd daemon answers on {socket}: {exc}") from exc
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if response.status >= 400 or answer is None:
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise AdminRefused(error["message"])
        raise AdminRefused(f"llmd answered {path} with HTTP {response.status}: {text[:200]!r}")
    return answer
