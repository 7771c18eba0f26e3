"""What the scheduler queues and decides (llmd/admission/scheduler.py): an `Entry` per request, its
`State`, a class's `ClassPolicy`, a `Rejection` and its `Reason`, one pass's `Decisions`, and the
capacity `Gate` a pass asks."""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol

from llmd.admission.classes import Priority
from llmd.admission.tenants import Tenant


class Reason(enum.StrEnum):
    """Why an entry was rejected; `code` is what the client sees."""

    RATE_LIMITED = "rate_limited"
    QUEUE_FULL = "queue_full"
    QUEUE_TIMEOUT = "queue_timeout"
    DEADLINE = "deadline"


class State(enum.Enum):
    """Where an entry is: queued, then released, rejected or cancelled; finished once released
    and done."""

    QUEUED = "queued"
    RELEASED = "released"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FINISHED = "finished"


@dataclasses.dataclass(frozen=True)
class ClassPolicy:
    """A class's queue: at most `queue_size` entries, each waiting at most `queue_timeout_s`;
    overdue (see the module docstring) after `aging_s` (0: never, for the top class)."""

    queue_size: int
    queue_timeout_s: float
    aging_s: float


@dataclasses.dataclass(eq=False)
class Entry:
    """One request as the scheduler sees it. `cost` is the KV tokens it may hold (the sum over
    its sequences of prompt + max_tokens, llmd/admission/cost.py); `seats` the sequences it
    runs in the engine (prompts x n); `deadline` an absolute time on the caller's clock, or
    None. `model` names its pool; `affinity` is its prefix key (llmd/routing/prefix.py; None:
    none); `conversation` its conversation's key during a canary (llmd/routing/canary.py);
    `backend` is where the gate released it (None while queued); `grace_s` is added to its
    class's queue timeout (the predicted wake of the asleep engines it came for)."""

    tenant: Tenant
    cls: Priority
    cost: int
    deadline: float | None = None
    seats: int = 1
    enqueued_at: float = 0.0
    released_at: float | None = None
    state: State = State.QUEUED
    seq: int = 0
    model: str = ""
    affinity: str | None = None
    conversation: str | None = None
    backend: str | None = None
    grace_s: float = 0.0

    def __repr__(self) -> str:
        return f"Entry({self.seq}, {self.tenant.name}, {self.cls.label}, {self.cost}, {self.state})"


@dataclasses.dataclass(frozen=True)
class Rejection:
    """`entry` is refused: `reason`, and `retry_after_s` from the release rate of the scope it
    waited on and its position there (llmd/admission/rates.py)."""

    entry: Entry
    reason: Reason
    retry_after_s: float


@dataclasses.dataclass
class Decisions:
    """One `decide`: the entries released (in order, each with its `backend`), those rejected,
    the picks the gate refused (each held back its class and those below on its pool), and the
    held picks the gate refused (each stopped every release on its pool; see the module
    docstring)."""

    released: list[Entry] = dataclasses.field(default_factory=list)
    rejected: list[Rejection] = dataclasses.field(default_factory=list)
    refused: list[Entry] = dataclasses.field(default_factory=list)
    held: list[Entry] = dataclasses.field(default_factory=list)


class Gate(Protocol):
    """Capacity: which backend of `entry`'s pool can take it now (None: none can; `overdue`:
    released by aging), and the accounting of a release there (llmd/admission/pools.py over
    one llmd/admission/capacity.py gate per backend)."""

    def admits(self, entry: Entry, overdue: bool) -> str | None: ...

    def on_release(self, entry: Entry, backend: str) -> None: ...
