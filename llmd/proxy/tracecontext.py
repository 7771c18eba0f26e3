"""The client's W3C trace context (https://www.w3.org/TR/trace-context/): read from the
request's headers, passed on to the backend (llmd/telemetry/tracing.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# version-trace_id-parent_id-flags, lowercase hex; an all-zero trace or parent id is invalid.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
TRACE_HEADERS = (b"traceparent", b"tracestate")


def trace_context(headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    """The W3C trace context among ASGI `headers`: `traceparent` when well formed, and
    `tracestate` beside it (only with a traceparent, as the recommendation reads it)."""
    found = {name.lower(): value for name, value in headers if name.lower() in TRACE_HEADERS}
    parent = found.get(b"traceparent", b"").decode("latin-1").strip().lower()
    if not _TRACEPARENT.match(parent):
        return ()
    state = found.get(b"tracestate", b"").decode("latin-1").strip()
    return (("traceparent", parent), *((("tracestate", state),) if state else ()))
