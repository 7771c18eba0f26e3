"""The ticks of uvicorn's main loop, counted: what an idle embedded server (llmd/embedded.py)
wakes for."""

from __future__ import annotations

import pytest
import uvicorn


def counted_ticks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The counters uvicorn's `Server.on_tick` is called with from now on, in order (a counter
    that is a multiple of 10 refreshes the `date` header)."""
    ticks: list[int] = []
    on_tick = uvicorn.Server.on_tick

    async def counted(self: uvicorn.Server, counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(self, counter)

    monkeypatch.setattr(uvicorn.Server, "on_tick", counted)
    return ticks
