"""The retry rule: once, on another backend, and only before the first byte."""

from __future__ import annotations

from llmd.routing.retry import Retry, Stop, Tries


def test_failure_before_the_first_byte_retries_once_elsewhere() -> None:
    """The first failure retries excluding the failed backend; the second does not."""
    tries = Tries()
    tries.sent("a")
    assert tries.after_failure(response_started=False) == Retry(exclude=frozenset({"a"}))
    tries.sent("b")
    assert tries.after_failure(response_started=False) is Stop.RETRIED


def test_never_after_the_first_byte() -> None:
    """Once the client has the response start, a failure ends the request (in-band error)."""
    tries = Tries()
    tries.sent("a")
    assert tries.after_failure(response_started=True) is Stop.STARTED
