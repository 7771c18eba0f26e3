"""A connection's deadline kept as a number and checked by one timer (llmd/proxy/protocol.py's
request head and idle keep-alive).

Why: arming and cancelling an event-loop timer for each request costs 2-4 µs under uvloop
(issue 37 item 3); setting a number costs nothing. The timer is armed once and, when it fires,
acts on the deadline then set: past it, `expired` is called; later, the timer moves to it;
none, the timer stops until the next `set_in`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadline:
    """One deadline (`due`: loop time, s; None: none set), one timer checking it.

    `name` says which deadline it is (the tests tell timers apart by it); `expired()` is
    called from the loop once `due` has passed, with `due` already cleared.
    """

    __slots__ = ("_expired", "_loop", "_timer", "due", "name")

    def __init__(
        self, name: str, loop: asyncio.AbstractEventLoop, expired: Callable[[], None]
    ) -> None:
        self.name = name
        self.due: float | None = None
        self._loop = loop
        self._expired = expired
        self._timer: asyncio.TimerHandle | None = None

    def set_in(self, seconds: float) -> None:
        """Due `seconds` from now. A timer set for later (a reload shortened the timeout) is
        replaced by one at the new deadline; one set for sooner stays and moves on when it
        fires."""
        self.due = due = self._loop.time() + seconds
        timer = self._timer
        if timer is not None and timer.when() > due:
            timer.cancel()
            timer = None
        if timer is None:
            self._timer = self._loop.call_at(due, self.check)

    def clear(self) -> None:
        """No deadline: the timer, if any, stays until it fires and finds none."""
        self.due = None

    def stop(self) -> None:
        """No deadline and no timer (the connection is gone)."""
        self.due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        """The timer fired: a deadline past is `expired`, a later one moves the timer to it,
        none stops it."""
        self._timer = None
        due = self.due
        if due is None:
            return
        if due > self._loop.time():
            self._timer = self._loop.call_at(due, self.check)
            return
        self.due = None
        self._expired()
