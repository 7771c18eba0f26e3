"""Counts of what admission did, for the metrics exporter and the status snapshot."""

from __future__ import annotations

import collections
import dataclasses
import enum


class Phase(enum.StrEnum):
    """Where a request was when its client left (or it was cut off)."""

    QUEUED = "queued"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclasses.dataclass
class AdmissionCounters:
    """Monotonic counts since start: rejections by reason (rate_limited, queue_full,
    queue_timeout, deadline), streams cut off because the client stopped reading, and requests
    released to the engine by class. Cancellations by phase are the request observer's
    (llmd/telemetry/observer.py): one count, read by the status and /metrics."""

    rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    released: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    stalled_streams: int = 0
