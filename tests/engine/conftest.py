"""The engine adapter's tests: the relay's client (test_wire.py) runs on both event loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """test_wire.py's tests on asyncio's loop and on uvloop's (llmd's, whose transports are
    not `asyncio.Transport`s); the others on asyncio's, as without this hook."""
    if item.path.name == "test_wire.py":
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
