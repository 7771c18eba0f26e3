"""The retry rule: a request whose backend fails before the client has seen a byte is tried once
more, on another backend of its pool; after the first byte, never (it would repeat output).

A failure is what the relay cannot pass on as the backend's answer: a refused or lost
connection, a timeout, a 5xx before the response started. A 4xx is the request's own fault and
is answered as it is. One retry at most, so a request that kills the engine it reaches (a
"query of death") takes down at most two.
"""

from __future__ import annotations

import dataclasses
import enum


class Stop(enum.StrEnum):
    """Why a failed request is not tried again (its error goes to the client)."""

    STARTED = "response_started"  # the client has bytes: a retry would repeat output
    RETRIED = "already_retried"  # it has had its one retry


@dataclasses.dataclass(frozen=True)
class Retry:
    """Send the request again, to a backend of its pool not in `exclude`."""

    exclude: frozenset[str]


@dataclasses.dataclass
class Tries:
    """The backends one request was sent to, in order; `max_tries` in all (2: one retry)."""

    tried: list[str] = dataclasses.field(default_factory=list)
    max_tries: int = 2

    def sent(self, backend: str) -> None:
        """The request is being sent to `backend`."""
        self.tried.append(backend)

    def after_failure(self, *, response_started: bool) -> Retry | Stop:
        """What to do after the last backend failed; `response_started`: the client has
        received the response start or any byte of it."""
        if response_started:
            return Stop.STARTED
        if len(self.tried) >= self.max_tries:
            return Stop.RETRIED
        return Retry(exclude=frozenset(self.tried))
