"""What admission takes of a request and gives back: the `AdmissionRequest` it weighs, the
`Ticket` of an admitted one, and the deadline a client may set (`x-llmd-deadline-ms`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.admission.budgets import Charge
from llmd.admission.classes import Priority
from llmd.admission.cost import Cost
from llmd.admission.entries import Entry
from llmd.admission.tenants import Tenant
from llmd.errors import InvalidRequest
from llmd.numerals import ascii_int
from llmd.quoting import header_text

DEADLINE_HEADER = b"x-llmd-deadline-ms"


@dataclasses.dataclass(frozen=True)
class AdmissionRequest:
    """What admission needs of a request: its tenant, class, cost (seats and KV tokens,
    llmd/admission/cost.py), deadline (monotonic s, from its arrival; None: none), the model
    whose pool serves it ("": the one pool of an llmd serving one model), its prefix key
    (llmd/routing/prefix.py; None: none) and, during a canary, its conversation's key
    (llmd/routing/canary.py)."""

    tenant: Tenant
    cls: Priority
    cost: Cost
    deadline: float | None = None
    model: str = ""
    affinity: str | None = None
    conversation: str | None = None


@dataclasses.dataclass
class Ticket:
    """An admitted request: hand it back to `Admission.finish` when the request ends.
    `entry.backend` is where it runs; `charge` what its tenant's token budgets reserved for it
    (settled at `finish`), `ratelimit` the x-ratelimit-*-tokens headers for its answer (none:
    its tenant has no budget)."""

    entry: Entry
    queue_ms: float
    charge: Charge | None = None
    ratelimit: list[tuple[bytes, bytes]] = dataclasses.field(default_factory=list)


def read_deadline(headers: list[Any], arrived_at: float) -> float | None:
    """The request's deadline (monotonic s) from `x-llmd-deadline-ms`, counted from its
    arrival at `arrived_at` (monotonic s), or None. Raises InvalidRequest (400, `param` the
    header)."""
    value = next((v for k, v in headers if k == DEADLINE_HEADER), None)
    if value is None:
        return None
    ms = ascii_int(value)
    if ms is None or not 0 < ms <= 86_400_000:
        raise InvalidRequest(
            "header x-llmd-deadline-ms must be a whole number of ms in 1..86400000, "
            f"got {header_text(value)}",
            param=DEADLINE_HEADER.decode(),
        )
    return arrived_at + ms / 1000
