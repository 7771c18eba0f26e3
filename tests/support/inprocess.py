"""llmd's daemon run in the test's own event loop (its state open to the test)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

import structlog

from llmd.config import Config
from llmd.daemon.daemon import Daemon
from llmd.logs import configure_logging


@contextlib.asynccontextmanager
async def running_daemon(config: Config) -> AsyncIterator[tuple[Daemon, asyncio.Task[None]]]:
    """Start a Daemon on `config` (sockets, proxy, engines) and run its main loop as a task;
    yield both; then SIGTERM it, shut it down and reset logging."""
    configure_logging(config.logging)
    daemon = Daemon(config)
    await daemon.startup()
    main = asyncio.create_task(daemon.main_loop())
    try:
        yield daemon, main
    finally:
        daemon._signals.put_nowait(signal.SIGTERM)
        await asyncio.wait({main}, timeout=30)
        await daemon.shutdown()
        structlog.reset_defaults()
        logging.getLogger().handlers[:] = []
