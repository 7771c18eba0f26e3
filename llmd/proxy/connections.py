"""The public listener's limit (`server.max_connections`): requests in progress at once,
answered as llmd answers past it.

uvicorn takes no new request past `limit_concurrency` open connections or running requests, and
answers it with its own 503 (`flow_control.service_unavailable`: plain text, no Retry-After).
`limited_protocol` is llmd's httptools protocol (`protocol.py`: the request head bounded) with
two changes:
- Only requests in progress count: connections open without one (a burst of clients that
  connected together, keep-alive connections between requests) do not, so a burst larger than
  the limit has its first `max_connections` requests served rather than every one refused
  (uvicorn counts every connection accepted, before any of their requests has run).
- Past the limit the answer is llmd's: 503 `too_many_connections`, OpenAI-shaped, with
  Retry-After (the time for one release at the measured rate), counted as a rejection (its
  `endpoint` the table's name for its path, `other` for a path no entry has).
  `GET /health`, `/ready` and `/metrics` are served past the limit (`PROBES`): a probe never
  sees llmd refuse it for being busy.

The limit bounds what requests being read cost llmd (each may buffer a read of body before llmd
reads it: uvicorn pauses reading past 64 KiB, and uvloop reads up to 250 KB at once); the body
budget (llmd/admission/bodies.py) bounds the bodies it reads. uvicorn reads the limit from its
config for each new connection, so a reload applies it to the connections that follow.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

from starlette.types import Receive, Scope, Send
from uvicorn._types import ASGI3Application, HTTPScope
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from llmd.endpoints.table import dialect_of, label_of
from llmd.errors import TooManyConnections
from llmd.proxy.middleware import REQUEST_ID_KEY, RequestIdMiddleware
from llmd.proxy.writer import send_error
from llmd.state import DaemonState

# Answered whatever the limit: a liveness probe refused at the limit would restart a live
# daemon, and a readiness probe or a scrape would lose sight of it when it is busiest. Each is
# a GET with no body that llmd answers from memory.
PROBES = frozenset({"/health", "/ready", "/metrics"})


def limited_protocol(
    state: DaemonState, base: type[asyncio.Protocol] = HttpToolsProtocol
) -> type[asyncio.Protocol]:
    """`base` (uvicorn's httptools protocol or a subclass: llmd/proxy/protocol.py) answering
    a request that finds `limit_concurrency` requests in progress with llmd's 503
    `too_many_connections` (accounted in `state.observer`); connections without a request in
    progress do not count. Raises TypeError for a `base` that is not an HttpToolsProtocol."""
    if not issubclass(base, HttpToolsProtocol):
        raise TypeError(f"{base.__name__} is not uvicorn's httptools protocol")

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        now = time.monotonic()
        limit = state.config.server.max_connections
        error = TooManyConnections(
            f"llmd has {limit} connections or requests open, its limit; retry later",
            retry_after_s=state.admission.scheduler.rates.wait_s((None, None), 0, now),
        )
        state.observer.rejected(
            scope[REQUEST_ID_KEY], error.status, error.reason, now, endpoint=label_of(scope["path"])
        )
        await send_error(send, error, dialect=dialect_of(scope["path"], scope["headers"]))

    # With the request id (and x-llmd-queue-ms on /v1), as every answer of llmd's app.
    over_limit = cast(ASGI3Application, RequestIdMiddleware(refuse))

    class LimitedHttpToolsProtocol(base):  # type: ignore[valid-type,misc]
        """uvicorn's protocol; `_start_asgi_task` is where every request's app is started,
        the limit's answer included, before the request's own task joins `tasks` (uvicorn
        0.30+: pinned by tests/proxy/test_connections.py)."""

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            if app is service_unavailable:
                limit = self.limit_concurrency
                room = limit is not None and len(self.tasks) < limit
                app = self.app if room or _is_probe(cycle.scope) else over_limit
            super()._start_asgi_task(cycle, app)

    return LimitedHttpToolsProtocol


def _is_probe(scope: HTTPScope) -> bool:
    """Whether `scope` is a GET of a probe route (`PROBES`), served past the limit."""
    return scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in PROBES
