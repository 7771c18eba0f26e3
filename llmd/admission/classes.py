"""The priority classes and how a request picks one (`x-llmd-priority`, clamped per tenant)."""

from __future__ import annotations

import enum

from llmd.errors import InvalidRequest
from llmd.quoting import header_text

PRIORITY_HEADER = b"x-llmd-priority"


class Priority(enum.IntEnum):
    """A request's class; the value is its rank (lower is served first), and is also what llmd
    sends as vLLM's request field `priority` (lower runs first, vLLM's priority scheduling)."""

    INTERACTIVE = 0
    NORMAL = 1
    BATCH = 2

    @classmethod
    def parse(cls, name: str) -> Priority:
        """`interactive|normal|batch` → Priority. Raises ValueError for anything else."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(name) from None

    @property
    def label(self) -> str:
        return _LABELS[self]


# The classes in rank order, and their labels: an Enum's own iteration and `name` cost
# microseconds each, and the scheduler walks the classes several times per request.
CLASSES: tuple[Priority, ...] = tuple(Priority)
_LABELS = {cls: cls.name.lower() for cls in CLASSES}


def requested_class(header: bytes | None, default: Priority, highest: Priority) -> Priority:
    """The class for a request: the header's (else `default`), never above `highest`.

    Raises InvalidRequest (400, `param` the header) for a header value that names no class
    (any case: `Priority.parse`).
    """
    chosen = default
    if header is not None:
        try:
            chosen = Priority.parse(header.decode("latin-1").strip())
        except ValueError:
            raise InvalidRequest(
                "header x-llmd-priority must be interactive, normal or batch, "
                f"got {header_text(header)}",
                param=PRIORITY_HEADER.decode(),
            ) from None
    return max(chosen, highest)
