"""The routing rule in simulation: prefix-cache hit rate and load imbalance against epsilon.

No engines: a discrete-event simulation drives llmd's own scheduler (llmd/admission/scheduler.py)
and pool capacity (llmd/admission/pools.py) with a synthetic shared-prefix workload. Requests
arrive as a Poisson stream at `--utilization` of the pool's seats; each belongs to one of
`--groups` prefix groups (Zipf popularity, exponent `--zipf`) or, for `--unkeyed` of them, has no
prefix key (a short prompt). Service times are uniform in 0.5..1.5 s and do not depend on the
backend or on cache hits (a pure routing measure). Each backend's prefix cache is modelled as an
LRU of `--cache-groups` prefix groups: a request hits when its backend holds its group.

Per policy (least load: no keys; affinity with each epsilon; affinity with no bound) and round
(a seed), it reports the hit rate of keyed requests, the time-averaged load imbalance
(max - min backend fill: in-flight / seats), the share of keyed requests that spilled off their
affinity backend by the load bound, and the share that ran off it for any reason (the bound, or
its seats all taken: the gates never hold a request while another backend has a seat), then the
median and range over rounds. Queue waits are left out: the
gates are work-conserving and service times do not depend on the backend, so they are the same
for every policy by construction.

    .venv/bin/python scripts/bench_routing.py [--rounds 3] [--requests 10000] [--backends 2]
        [--zipf 1.0] [--output docs/bench/routing-sim.json]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import heapq
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.admission.capacity import CapacityGate  # noqa: E402
from llmd.admission.classes import Priority  # noqa: E402
from llmd.admission.entries import ClassPolicy, Entry  # noqa: E402
from llmd.admission.pools import PoolCapacity, PoolGate  # noqa: E402
from llmd.admission.scheduler import Scheduler  # noqa: E402
from llmd.admission.tenants import Tenant  # noqa: E402
from llmd.routing.backend import BackendKind  # noqa: E402
from llmd.routing.choice import AffinityPolicy, rendezvous_order  # noqa: E402

MODEL = "m"
EPSILONS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
FIELDS = ("hit_rate", "imbalance", "spilled", "off_home")
NO_BOUND = 1e9  # an epsilon no fill reaches: affinity limited only by the backend's seats
POLICIES = {
    cls: ClassPolicy(queue_size=10**6, queue_timeout_s=1e9, aging_s=0.0) for cls in Priority
}


@dataclasses.dataclass(frozen=True)
class Workload:
    requests: int
    backends: int
    seats: int
    groups: int
    zipf: float
    unkeyed: float
    utilization: float
    cache_groups: int


@dataclasses.dataclass
class Result:
    hit_rate: float
    imbalance: float
    spilled: float
    off_home: float


def run(workload: Workload, epsilon: float | None, seed: int) -> Result:
    """One simulated run: `epsilon` None routes without keys (least load)."""
    rng = random.Random(seed)
    affinity = AffinityPolicy(epsilon=epsilon if epsilon is not None else 0.0)
    capacity = PoolCapacity(affinity)
    names = [f"engine-{i}" for i in range(workload.backends)]
    for name in names:
        capacity.add(name, BackendKind.ENGINE, [MODEL], CapacityGate(max_in_flight=workload.seats))
    scheduler = Scheduler(POLICIES)
    weights = [1 / (rank + 1) ** workload.zipf for rank in range(workload.groups)]
    caches = {name: collections.OrderedDict[str, None]() for name in names}
    keys: dict[Entry, str | None] = {}
    events: list[tuple[float, int, str, Entry | None]] = []  # (time, seq, kind, entry)
    rate = workload.utilization * workload.backends * workload.seats  # mean service 1 s
    now, seq = 0.0, 0
    for _ in range(workload.requests):
        now += rng.expovariate(rate)
        seq += 1
        heapq.heappush(events, (now, seq, "arrive", None))
    hits = keyed = spilled = off_home = 0
    imbalance_area, last_t = 0.0, 0.0
    tenant = Tenant()

    def key_of(key: str | None) -> str | None:
        return None if epsilon is None else key

    while events:
        t, _, kind, entry = heapq.heappop(events)
        fills = [capacity.gate(name).in_flight / workload.seats for name in names]
        imbalance_area += (max(fills) - min(fills)) * (t - last_t)
        last_t = t
        if kind == "arrive":
            group = rng.choices(range(workload.groups), weights)[0]
            key = None if rng.random() < workload.unkeyed else f"group-{group}"
            entry = Entry(tenant, Priority.NORMAL, 1, model=MODEL, affinity=key_of(key))
            keys[entry] = key
            scheduler.submit(entry, t)
        else:
            assert entry is not None
            scheduler.finish(entry)
            capacity.on_finish(entry)
        gate = PoolGate(capacity, t)
        for released in scheduler.decide(t, gate).released:
            backend = capacity.backend_of(released)
            assert backend is not None
            key = keys.pop(released)
            if key is not None:
                keyed += 1
                spilled += gate.choices[released].spilled
                off_home += backend != rendezvous_order(key, names)[0]
                hits += _touch(caches[backend], key, workload.cache_groups)
            seq += 1
            heapq.heappush(events, (t + rng.uniform(0.5, 1.5), seq, "finish", released))
    return Result(
        hit_rate=hits / max(keyed, 1),
        imbalance=imbalance_area / max(last_t, 1e-9),
        spilled=spilled / max(keyed, 1),
        off_home=off_home / max(keyed, 1),
    )


def _touch(cache: collections.OrderedDict[str, None], key: str, size: int) -> bool:
    """Whether `key` is in the LRU `cache` of `size` groups; it becomes the most recent."""
    hit = key in cache
    cache[key] = None
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
    return hit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--backends", type=int, default=2)
    parser.add_argument("--seats", type=int, default=16)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--zipf", type=float, default=1.0, help="0: groups equally popular")
    parser.add_argument("--unkeyed", type=float, default=0.2)
    parser.add_argument("--utilization", type=float, default=0.8)
    parser.add_argument("--cache-groups", type=int, default=16)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    workload = Workload(
        args.requests, args.backends, args.seats, args.groups, args.zipf, args.unkeyed,
        args.utilization, args.cache_groups,
    )  # fmt: skip
    policies: list[tuple[str, float | None]] = [("least load", None)]
    policies += [(f"affinity eps={eps:g}", eps) for eps in EPSILONS]
    policies.append(("affinity, no bound", NO_BOUND))
    rows: dict[str, list[Result]] = {}
    for label, epsilon in policies:
        rows[label] = [run(workload, epsilon, seed) for seed in range(args.rounds)]
    print(f"workload: {dataclasses.asdict(workload)}, rounds: {args.rounds}")
    print(f"{'policy':<20} " + " ".join(f"{field:>20}" for field in FIELDS))
    for label, results in rows.items():
        cells = [_spread([getattr(r, f) for r in results]) for f in FIELDS]
        print(f"{label:<20} " + " ".join(f"{cell:>20}" for cell in cells))
    if args.output:
        report = {
            "command": " ".join(["scripts/bench_routing.py", *sys.argv[1:]]),
            "workload": dataclasses.asdict(workload),
            "rounds": args.rounds,
            "policies": {label: [dataclasses.asdict(r) for r in rs] for label, rs in rows.items()},
        }
        args.output.write_text(json.dumps(report, indent=1) + "\n")


def _spread(values: list[float]) -> str:
    """Median and range: '0.712 (0.70-0.73)'."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


if __name__ == "__main__":
    main()
