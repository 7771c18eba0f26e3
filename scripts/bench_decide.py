"""CPU per scheduling decision (llmd/admission/scheduler.py): a `decide` with the `submit` and
the `finish` of the request it releases, against a gate that costs next to nothing.

Two loads, each step one release of one slot (a request ends, one is queued, `decide`):
- `drr`: 4 tenants (weights 0.5, 1, 2, 4) backlogged in one class on one pool, 3 queued each
  (the DRR property test's shape, tests/admission/test_scheduler.py);
- `mixed`: 3 tenants in 3 classes on 2 pools, 4 slots a pool, a new request a step by turns
  (the classes above pass a refused pick, aging and holds come into play).

Each round runs `--batches` x `--steps` decisions per load and reports CPU µs per decision
(`time.process_time`); the table gives the median (min-max) of the rounds.

Usage: PYTHONPATH=. python scripts/bench_decide.py [--rounds 5] [--batches 20] [--steps 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import time
from collections.abc import Callable

from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Entry
from llmd.admission.scheduler import Scheduler
from llmd.admission.tenants import Tenant


@dataclasses.dataclass
class _Slots:
    """A gate of `slots` slots per pool (`entry.model`)."""

    slots: int
    busy: dict[str, int] = dataclasses.field(default_factory=dict)

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        return entry.model if self.busy.get(entry.model, 0) < self.slots else None

    def on_release(self, entry: Entry, backend: str) -> None:
        self.busy[backend] = self.busy.get(backend, 0) + 1

    def on_finish(self, entry: Entry) -> None:
        self.busy[entry.model] -= 1


def _policies() -> dict[Priority, ClassPolicy]:
    return {
        Priority.INTERACTIVE: ClassPolicy(100_000, 1e9, 0.0),
        Priority.NORMAL: ClassPolicy(100_000, 1e9, 2.0),
        Priority.BATCH: ClassPolicy(100_000, 1e9, 4.0),
    }


def drr(steps: int) -> float:
    """CPU seconds of `steps` decisions of the `drr` load."""
    tenants = [Tenant(f"t{i}", weight=w) for i, w in enumerate((0.5, 1.0, 2.0, 4.0))]
    scheduler, gate = Scheduler(_policies()), _Slots(1)
    costs = itertools.cycle((100, 900, 2500, 4000, 40, 1700))
    for tenant in tenants:
        for _ in range(3):
            scheduler.submit(Entry(tenant, Priority.NORMAL, next(costs)), 0.0)
    start = time.process_time()
    for _ in range(steps):
        (entry,) = scheduler.decide(0.0, gate).released
        scheduler.finish(entry)
        gate.on_finish(entry)
        scheduler.submit(Entry(entry.tenant, Priority.NORMAL, next(costs)), 0.0)
    return time.process_time() - start


def mixed(steps: int) -> float:
    """CPU seconds of `steps` decisions of the `mixed` load."""
    tenants = [Tenant("user"), Tenant("team", weight=2.0), Tenant("batcher", max_concurrency=4)]
    scheduler, gate = Scheduler(_policies()), _Slots(4)
    arrivals = itertools.cycle(
        [(tenants[0], Priority.INTERACTIVE, "a"), (tenants[1], Priority.NORMAL, "b"),
         (tenants[2], Priority.BATCH, "a"), (tenants[0], Priority.INTERACTIVE, "b"),
         (tenants[2], Priority.BATCH, "b"), (tenants[1], Priority.NORMAL, "a")]
    )  # fmt: skip
    running: list[Entry] = []
    now = 0.0
    for _ in range(24):
        tenant, cls, pool = next(arrivals)
        scheduler.submit(Entry(tenant, cls, 500, model=pool), now)
    start = time.process_time()
    for _ in range(steps):
        now += 0.05
        if len(running) >= 8:
            done = running.pop(0)
            scheduler.finish(done)
            gate.on_finish(done)
        tenant, cls, pool = next(arrivals)
        scheduler.submit(Entry(tenant, cls, 500, model=pool), now)
        running.extend(scheduler.decide(now, gate).released)
    return time.process_time() - start


LOADS: dict[str, Callable[[int], float]] = {"drr": drr, "mixed": mixed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20, help="runs per round and load")
    parser.add_argument("--steps", type=int, default=2000, help="decisions per run")
    args = parser.parse_args()
    for name, load in LOADS.items():
        rounds = []
        for _ in range(args.rounds):
            cpu = sum(load(args.steps) for _ in range(args.batches))
            rounds.append(cpu / (args.batches * args.steps) * 1e6)
        print(
            f"{name}: {statistics.median(rounds):.1f} µs per decision "
            f"({min(rounds):.1f}-{max(rounds):.1f}), {args.rounds} rounds of "
            f"{args.batches} x {args.steps}"
        )


if __name__ == "__main__":
    main()
