"""How a request ended: one outcome and one label per request, and the counts of each since
llmd started. Every ended request lands in exactly one count: `requests` is always `answered`
plus the sums of `rejections`, `cancellations`, `aborted` and `errors`.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Protocol

from llmd.errors import ApiError
from llmd.status import CountsStatus
from llmd.telemetry.metrics import CANCEL_PHASES

# Ended by llmd after the client's answer began, with no error to send: the client stopped
# reading (llmd/proxy/stalls.py).
SILENT_ABORT_CODES = frozenset({"slow_consumer"})
# The label of a failure that carries no code of its own.
UNKNOWN_FAILURE = "internal_error"


class Outcome(enum.StrEnum):
    """How a request ended (the `outcome` of its log line and its `llmd_requests_total`)."""

    OK = "ok"  # answered in full by a backend
    REJECTED = "rejected"  # refused for its own sake: before a backend, or a backend's 4xx
    CANCELLED = "cancelled"  # the client left first
    ABORTED = "aborted"  # llmd ended it: operator cancel, drain deadline, client send timeout
    ERROR = "error"  # it failed: the backend or llmd did not serve it


class Ending(Protocol):
    """What `classify` reads from a request (`llmd.inflight.Exchange` is one)."""

    status: int | None
    error_code: str | None
    rejected: bool
    client_gone: bool
    abort_error: ApiError | None

    @property
    def phase(self) -> str: ...


def classify(record: Ending) -> tuple[Outcome, str]:
    """The outcome of `record` and its label: the error code (its name, `ApiError.reason`) for
    a rejection, an abort or an error, the phase (queued, prefill, decode) for a
    cancellation, "" for a success."""
    if record.rejected:
        return Outcome.REJECTED, record.error_code or UNKNOWN_FAILURE
    if record.client_gone:
        return Outcome.CANCELLED, record.phase
    if record.abort_error is not None:
        return Outcome.ABORTED, record.abort_error.reason
    if record.error_code in SILENT_ABORT_CODES:
        return Outcome.ABORTED, record.error_code
    if record.error_code is not None or (record.status or 500) >= 400:
        return Outcome.ERROR, record.error_code or UNKNOWN_FAILURE
    return Outcome.OK, ""


@dataclasses.dataclass
class Tallies:
    """Counts since llmd started: every ended request (`requests`) once in `answered` or by
    label in `rejections` (code), `cancellations` (phase), `aborted` (code) or `errors`
    (code); `timeouts` counts again those ended by a queue timeout or deadline."""

    requests: int = 0
    answered: int = 0
    rejections: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    cancellations: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    aborted: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    timeouts: int = 0
    # The same requests by endpoint (its name in the endpoint table), then by outcome; in the
    # order each endpoint first ended a request.
    by_endpoint: dict[str, collections.Counter[Outcome]] = dataclasses.field(default_factory=dict)

    def add(self, outcome: Outcome, label: str, endpoint: str | None = None) -> None:
        """Count one ended request (at `endpoint` too, when given)."""
        self.requests += 1
        if endpoint is not None:
            self.by_endpoint.setdefault(endpoint, collections.Counter())[outcome] += 1
        if outcome is Outcome.OK:
            self.answered += 1
            return
        by_label = {
            Outcome.REJECTED: self.rejections,
            Outcome.CANCELLED: self.cancellations,
            Outcome.ABORTED: self.aborted,
            Outcome.ERROR: self.errors,
        }[outcome]
        by_label[label] += 1

    def as_counts(self) -> CountsStatus:
        """The counts as the Status carries them (every cancellation phase named, 0 or not)."""
        return CountsStatus(
            requests=self.requests,
            answered=self.answered,
            rejections=dict(self.rejections),
            cancellations={phase: self.cancellations[phase] for phase in CANCEL_PHASES},
            aborted=dict(self.aborted),
            errors=dict(self.errors),
            timeouts=self.timeouts,
        )
