"""The admin API client (no widgets): used by the CLI verbs and by llmd-top."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp


class AdminUnreachable(Exception):
    """The daemon's admin socket is missing or refused the connection."""


async def admin_request(socket: Path, method: str, path: str, timeout_s: float = 10.0) -> Any:
    """Call the admin API at `socket`; the decoded JSON answer.

    Raises AdminUnreachable when no daemon answers on `socket`.
    """
    connector = aiohttp.UnixConnector(path=str(socket))
    try:
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.request(
                method, "http://llmd" + path, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response,
        ):
            return await response.json()
    except (aiohttp.ClientConnectionError, FileNotFoundError, PermissionError) as exc:
        raise AdminUnreachable(f"no llmd daemon answers on {socket}: {exc}") from exc
