"""Official API clients that a test makes and hands around, closed when the test ends.

A sync `openai.OpenAI` or `anthropic.Anthropic` client sits in a reference cycle (its resources
point back at it), so only the cyclic garbage collector frees one left open, and it finalises
the client and its pooled sockets in no set order: a socket finalised first warns that it was
not closed (a ResourceWarning, an error under the suite's `filterwarnings`). A test that cannot
use `with` (a helper returns the client) passes it through `closed_after_test`; the autouse
fixture `close_test_clients` (tests/conftest.py) closes them after each test.
"""

from __future__ import annotations

from typing import Protocol, TypeVar


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)

_open: list[_Closable] = []


def closed_after_test(client: C) -> C:
    """`client`, to be closed when the running test ends."""
    _open.append(client)
    return client


def close_all() -> None:
    """Close every client `closed_after_test` was given since the last call."""
    while _open:
        _open.pop().close()
