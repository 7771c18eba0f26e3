"""The memory budget of request bodies: bytes llmd holds for requests not yet sent to the engine.
Pure (no I/O).

- A request's share follows the bytes llmd has of its body: it starts empty and grows as each
  chunk is read (never by what a Content-Length promises, so a client that declares a body and
  stalls holds nothing it has not sent), and is given back once the body has gone to the engine
  or the request has ended, whichever comes first.
- While the requests holding bodies (being read, validated or queued) would pass
  `admission.max_queued_bytes`, a request is refused (429 `queue_full`, with Retry-After): a new
  one before its body is read, one being read as the chunk that would pass it arrives. So what
  llmd keeps of waiting requests is bounded by the budget, whatever the number of clients.
- A request always fits when no other holds bytes, so a body larger than the budget is not
  refused forever.
- When the budget empties again, `on_drained` hears the most it held since it was last empty
  (the daemon then gives freed memory back to the system: llmd/allocator.py).
"""

from __future__ import annotations

from collections.abc import Callable


class BodyBudget:
    """Bytes of request bodies held now (`held`) against `limit` (0: no limit); `peak` is the
    most held since the budget was last empty, handed to `on_drained` when it empties."""

    def __init__(self, limit: int, on_drained: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        self.on_drained = on_drained

    def reserve(self, nbytes: int) -> BodyHold | None:
        """Hold `nbytes` for one request, or None: over the limit."""
        if not self.fits(self.held, nbytes):
            return None
        self._change(nbytes)
        return BodyHold(self, nbytes)

    def fits(self, others: int, nbytes: int) -> bool:
        """Whether one request may hold `nbytes` while the others hold `others`: within the
        limit, or alone (so a body larger than the budget is not refused forever)."""
        return not (self.limit and others and others + nbytes > self.limit)

    def _change(self, nbytes: int) -> None:
        self.held += nbytes
        self.peak = max(self.peak, self.held)
        if self.held == 0 and self.peak:
            peak, self.peak = self.peak, 0
            if self.on_drained is not None:
                self.on_drained(peak)


class BodyHold:
    """One request's share of the budget; `release` is idempotent."""

    def __init__(self, budget: BodyBudget, nbytes: int) -> None:
        self._budget: BodyBudget | None = budget
        self.nbytes = nbytes

    def grow(self, nbytes: int) -> bool:
        """The body being read now takes `nbytes` (more than before): True once held; False,
        nothing changed, when others hold bytes and the budget would pass its limit. True
        once released (nothing is held)."""
        budget = self._budget
        if budget is None or nbytes <= self.nbytes:
            return True
        if not budget.fits(budget.held - self.nbytes, nbytes):
            return False
        self.resize(nbytes)
        return True

    def resize(self, nbytes: int) -> None:
        """The body now takes `nbytes` (read, or rewritten by validation); never refused.
        Nothing once released."""
        if self._budget is not None:
            self._budget._change(nbytes - self.nbytes)
            self.nbytes = nbytes

    def release(self) -> None:
        """The body has gone to the engine, or the request has ended."""
        if self._budget is not None:
            budget, self._budget = self._budget, None
            budget._change(-self.nbytes)
            self.nbytes = 0
