"""Slow consumers: a client that stops reading has its stream ended and its upstream closed.

- Each stream's send buffer is bounded: the kernel's (`server.send_buffer_bytes`, SO_SNDBUF on
  the listening socket, inherited by each connection) plus uvicorn's transport buffer (64 KiB
  high water mark), past which uvicorn's `send` waits for the client.
- A watcher checks the in-flight exchanges a few times a second and cancels those whose send
  has waited longer than `server.send_timeout_s`: the relay then closes the upstream request
  (vLLM aborts the sequence) and returns without completing the response, so uvicorn closes the
  connection. Nothing else waits on that client, so no other stream slows down.
- Not a timeout on each send: that would cost a task per chunk on Python 3.11
  (`asyncio.wait_for`).
"""

from __future__ import annotations

import asyncio
import time

import structlog

from llmd.state import DaemonState

log = structlog.get_logger("llmd.proxy")


async def watch_stalls(state: DaemonState) -> None:
    """Run until cancelled: end exchanges whose client has not read for send_timeout_s."""
    while True:
        timeout = state.config.server.send_timeout_s
        await asyncio.sleep(min(1.0, max(timeout / 4, 0.05)))
        if not timeout:
            continue
        for exchange in state.inflight.end_stalled(time.monotonic() - timeout):
            log.warning("client_too_slow", request_id=exchange.request_id, send_timeout_s=timeout)
