"""The memory budget of request bodies: bytes llmd holds for requests not yet sent to the engine.

A request reserves its body's size (its Content-Length, else `server.max_body_bytes`) before
llmd reads the body, and gives it back once the body has gone to the engine or the request has
ended, whichever comes first. While the requests holding bodies (being read, validated or
queued) would pass `admission.max_queued_bytes`, a new one is refused (429 `queue_full`, with
Retry-After) before its body is read. So what llmd keeps of waiting requests is bounded by the
budget, whatever the number of clients; a request always fits when nothing is held, so a body
larger than the budget is not refused forever. Pure (no I/O).
"""

from __future__ import annotations


class BodyBudget:
    """Bytes of request bodies held now (`held`) against `limit` (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def reserve(self, nbytes: int) -> BodyHold | None:
        """Hold `nbytes` for one request, or None: over the limit."""
        if self.limit and self.held and self.held + nbytes > self.limit:
            return None
        self.held += nbytes
        return BodyHold(self, nbytes)


class BodyHold:
    """One request's share of the budget; `release` is idempotent."""

    def __init__(self, budget: BodyBudget, nbytes: int) -> None:
        self._budget: BodyBudget | None = budget
        self.nbytes = nbytes

    def resize(self, nbytes: int) -> None:
        """The body now takes `nbytes` (read, or rewritten by validation); never refused.
        Nothing once released."""
        if self._budget is not None:
            self._budget.held += nbytes - self.nbytes
            self.nbytes = nbytes

    def release(self) -> None:
        """The body has gone to the engine, or the request has ended."""
        if self._budget is not None:
            self._budget.held -= self.nbytes
            self._budget = None
            self.nbytes = 0
