"""A swap group's engines as a step model drives the swap core (llmd/admission/swap.py), with
no processes: what each step shares in tests/admission/test_swap.py, test_swap_memory.py and
scripts/swap_model.py (calls arrive and queue, calls that ended leave, wakes that ended are
awake, the core sees the engines and decides, its sleeps and wakes apply, queued calls start on
awake engines). What each checks of a step stays with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from llmd.admission.swap import EngineView, Plan, Residency


@dataclasses.dataclass
class StepEngine:
    """One engine: where it is, since when awake and when its wake ends (s), its calls' end
    times (s), its awake footprint (bytes; 0 in a group counted by engines), and since when it
    has been awake with nothing to do (None: not idle; kept by the tests of the idle rule)."""

    residency: Residency = Residency.ASLEEP
    awake_since: float | None = None
    ready_at: float = 0.0
    running: list[float] = dataclasses.field(default_factory=list)
    size: int = 0
    idle_since: float | None = None


def arrivals(trace: Iterable[tuple[str, float, float]]) -> list[tuple[float, str, float]]:
    """A trace of (model, gap before it, duration) as (arrival time, model, duration), s."""
    found, at = [], 0.0
    for model, gap, duration in trace:
        at += gap
        found.append((at, model, duration))
    return found


def advance(engines: Mapping[str, StepEngine], now: float) -> None:
    """Calls that ended by `now` leave their engine; an engine whose wake ended is awake."""
    for engine in engines.values():
        engine.running = [end for end in engine.running if end > now]
        if engine.residency is Residency.WAKING and engine.ready_at <= now:
            engine.residency, engine.awake_since = Residency.AWAKE, now


def views(
    engines: Mapping[str, StepEngine],
    waiting: Mapping[str, int],
    wake_s: float,
    asleep_bytes: int = 0,
) -> list[EngineView]:
    """What the core sees of `engines`, with `waiting` calls queued per model, each engine's
    predicted wake `wake_s` and `asleep_bytes` held asleep (a group fit by memory)."""
    return [
        EngineView(
            name,
            engine.residency,
            in_flight=len(engine.running),
            waiting=waiting.get(name, 0),
            awake_since=engine.awake_since,
            wake_s=wake_s,
            awake_bytes=engine.size,
            asleep_bytes=asleep_bytes,
        )
        for name, engine in engines.items()
    ]


def apply(engines: Mapping[str, StepEngine], plan: Plan, now: float, wake_s: float) -> None:
    """`plan` at `now`: the engines put to sleep are asleep at once, those woken are awake
    `wake_s` later."""
    for name, _ in plan.sleep:
        engines[name].residency, engines[name].awake_since = Residency.ASLEEP, None
    for name in plan.wake:
        engines[name].residency, engines[name].ready_at = Residency.WAKING, now + wake_s


def arrive(
    due: list[tuple[float, str, float]], queued: list[tuple[float, str, float]], now: float
) -> None:
    """Move the calls of `due` (arrival order) that have arrived by `now` to `queued`."""
    while due and due[0][0] <= now:
        queued.append(due.pop(0))


def start_queued(
    engines: Mapping[str, StepEngine],
    queued: list[tuple[float, str, float]],
    plan: Plan,
    now: float,
) -> list[float]:
    """Start each queued call whose engine is awake and whose model `plan` does not close to
    newcomers: it leaves `queued` and runs until `now` plus its duration. How long each
    started call waited (s), in queue order."""
    waits = []
    for item in list(queued):
        arrived, model, duration = item
        engine = engines[model]
        if engine.residency is Residency.AWAKE and model not in plan.closed:
            queued.remove(item)
            waits.append(now - arrived)
            engine.running.append(now + duration)
    return waits
