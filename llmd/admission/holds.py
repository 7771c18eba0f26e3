"""The device hold at work (its rule is llmd/admission/sharing.py): which interactive requests
wait for their first token or run, which batch requests run, the gate of each pump, the engines
held or limited and why, and how many batch requests were held."""

from __future__ import annotations

from collections.abc import Iterable

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry, Gate, State
from llmd.admission.pools import PoolCapacity, PoolGate
from llmd.admission.scheduler import Scheduler
from llmd.admission.sharing import LINGER_S, DeviceHold, HoldGate, device_groups
from llmd.config import Config
from llmd.status import DeviceHoldStatus


class DeviceHolds:
    """The device hold of one admission. `released` and `first_byte`/`finished` follow the
    interactive requests sent to a backend until their first byte, and the interactive and
    batch requests running, for the seat limit; `gate` gives each pump's gate and leaves `held`
    (engine -> the engine it yields to), `limited` (engine -> the engine with interactive work
    it yields batch seats to), `paused` (engine -> when its pause began, monotonic s: the
    engines to keep stopped) and `lapse_at` (when the bound lets a held batch request go or
    ends a pause, monotonic s; None: neither) for the caller's timer. `orders` turns `paused`
    into stop and go-on orders and counts them: `stopped` (engine -> when it was stopped,
    monotonic s), `pauses` and `paused_s` (since llmd started, for status and metrics)."""

    def __init__(self) -> None:
        self.hold = DeviceHold()
        self.held: dict[str, str] = {}
        self.limited: dict[str, str] = {}
        self.lapse_at: float | None = None
        self.paused: dict[str, float] = {}
        self.holds = 0  # batch requests held at least once
        self.stopped: dict[str, float] = {}  # engines ordered stopped -> when (monotonic s)
        self.pauses = 0  # engines stopped, counted at each stop
        self.paused_s = 0.0  # time engines spent stopped, counted when each goes on (s)
        self._awaiting: dict[Entry, None] = {}  # interactive, sent, no byte back yet
        self._running: dict[Entry, None] = {}  # interactive and batch, sent, not ended
        self._normal: dict[Entry, None] = {}  # normal, sent, not ended (engines never paused)
        self._spent: set[str] = set()  # engines whose pause reached the bound in this hold
        self._seen: dict[str, float] = {}  # engine -> last time interactive work was there
        self._counted: set[Entry] = set()  # queued batch requests already counted as held
        self._gate: HoldGate | None = None

    def configure(self, config: Config) -> None:
        """The groups from the engines' devices (`EngineConfig.shared_device`), the bound from
        `admission.device_hold_ratio` x the interactive class's TTFT budget, the seat limit
        from `admission.device_batch_seats`, the pause from `admission.device_pause`."""
        admission = config.admission
        engines = config.engine_tables
        groups = device_groups({name: e.shared_device for name, e in engines.items()})
        budget_s = admission.interactive.ttft_p95_budget_ms / 1000
        bound_s = admission.device_hold_ratio * budget_s
        self.hold = DeviceHold(
            groups, bound_s, admission.device_batch_seats, admission.device_pause
        )

    @property
    def off(self) -> bool:
        """No engines share a device (no hold, no seat limit) and none is paused: a pass's
        gate is the pools' own, and the hold has nothing to order."""
        return not (self.hold.active or self.hold.limits or self.paused or self.stopped)

    def released(self, entries: Iterable[Entry]) -> None:
        """Entries a pump released: the interactive ones wait for their first byte; the
        interactive and batch ones run (the seat limit counts them)."""
        if not self.hold.groups:
            return
        for entry in entries:
            if entry.backend is None:
                continue
            if entry.cls is Priority.NORMAL:
                self._normal[entry] = None
                continue
            self._running[entry] = None
            if entry.cls is Priority.INTERACTIVE:
                self._awaiting[entry] = None

    def first_byte(self, entry: Entry) -> bool:
        """`entry`'s first byte reached llmd; whether engines are held (the queue should run)."""
        if entry not in self._awaiting:
            return False
        del self._awaiting[entry]
        return bool(self.held)

    def finished(self, entry: Entry, now: float) -> None:
        """`entry` ended (any way) at `now` (monotonic s)."""
        self._awaiting.pop(entry, None)
        self._normal.pop(entry, None)
        if entry in self._running:
            del self._running[entry]
            if entry.cls is Priority.INTERACTIVE and entry.backend is not None:
                self._seen[entry.backend] = now

    def gate(
        self, inner: PoolGate, scheduler: Scheduler, capacity: PoolCapacity, now: float
    ) -> Gate:
        """The gate of a pump at `now` over `inner`: `inner` itself when nothing is held."""
        self._gate = None
        self.lapse_at = None
        self.held, self.limited = {}, {}
        if not self.hold.active and not self.hold.limits:
            self.paused = {}
            return inner
        waiting = [entry.backend for entry in self._awaiting if entry.backend is not None]
        for pool in scheduler.queued_pools(Priority.INTERACTIVE):
            waiting.extend(capacity.pool(pool) or ())
        self.held = self.hold.held(waiting)
        self._pause(now)
        seats_left = self._seats_left(waiting, now)
        if not self.held and not seats_left:
            return inner
        waits: dict[str, float] = {}
        for pool in scheduler.queued_pools(Priority.BATCH):
            oldest = scheduler.oldest_in(Priority.BATCH, pool)
            if oldest is None:
                continue
            waits[pool] = now - oldest
            held_there = any(name in self.held for name in capacity.pool(pool) or ())
            if held_there and waits[pool] < self.hold.bound_s:
                lapse = oldest + self.hold.bound_s
                self.lapse_at = lapse if self.lapse_at is None else min(self.lapse_at, lapse)
        self._gate = HoldGate(inner, self.hold, self.held.keys(), waits, seats_left)
        return self._gate

    def _pause(self, now: float) -> None:
        """The engines to keep stopped at `now` (`DeviceHold.paused`), and a pump when the
        first of their pauses reaches the bound (`lapse_at`)."""
        before, self._spent = self.paused, self._spent & self.held.keys()
        self.paused = self.hold.paused(self.held, self._busy(), before, self._spent, now)
        self._spent |= (before.keys() & self.held.keys()) - self.paused.keys()
        if self.paused:
            self.lapse_at = min(self.paused.values()) + self.hold.bound_s

    def orders(self, now: float) -> tuple[list[str], list[str]]:
        """The engines to let go on and the engines to stop at `now` (monotonic s), in name
        order: the changes from `stopped` to the pauses wanted (`paused`), counted."""
        wanted = self.paused.keys()
        go_on = sorted(self.stopped.keys() - wanted)
        for name in go_on:
            self.paused_s += now - self.stopped.pop(name)
        stop = sorted(wanted - self.stopped.keys())
        for name in stop:
            self.stopped[name] = now
        self.pauses += len(stop)
        return go_on, stop

    def _busy(self) -> set[str]:
        """The engines running an interactive or normal request (never paused)."""
        return {
            entry.backend
            for entry in (*self._running, *self._normal)
            if entry.cls is not Priority.BATCH and entry.backend is not None
        }

    def _seats_left(self, waiting: list[str], now: float) -> dict[str, int]:
        """The seat limit at `now`: engine -> batch requests it may still start, for the
        engines of a group where interactive work is present (`waiting`: the engines where an
        interactive request is queued for or waits on; running or ended within LINGER_S
        count too). Sets `limited`."""
        if not self.hold.limits:
            return {}
        running = [e.backend for e in self._running if e.cls is Priority.INTERACTIVE]
        for engine in (*waiting, *running):
            if engine is not None:
                self._seen[engine] = now
        present = [name for name, at in self._seen.items() if now - at <= LINGER_S]
        self.limited = self.hold.limited(present)
        batch: dict[str, int] = {}
        for entry in self._running:
            if entry.cls is Priority.BATCH and entry.backend in self.limited:
                batch[entry.backend] = batch.get(entry.backend, 0) + 1
        return {name: self.hold.batch_seats - batch.get(name, 0) for name in self.limited}

    def decided(self, released: Iterable[Entry]) -> None:
        """After the pump's pass: its interactive releases wait for their first byte, and
        the batch requests its gate held are counted (each once); an engine it released an
        interactive or normal request to is not paused."""
        self.released(released)
        if self.paused:
            busy = self._busy()
            self.paused = {name: at for name, at in self.paused.items() if name not in busy}
        self._counted = {entry for entry in self._counted if entry.state is State.QUEUED}
        if self._gate is not None:
            for entry in self._gate.refused:
                if entry not in self._counted:
                    self._counted.add(entry)
                    self.holds += 1

    def as_snapshot(self, now: float) -> DeviceHoldStatus | None:
        """The hold's part of the Status at `now` (monotonic s); None when no engines share a
        device."""
        groups = sorted({tuple(sorted(group)) for group in self.hold.groups.values()})
        if not groups:
            return None
        held = tuple(sorted(self.held))
        reasons = tuple(
            f"an interactive request waits for its first token on {self.held[name]}"
            for name in held
        )
        limited = tuple(sorted(self.limited))
        return DeviceHoldStatus(
            tuple(groups),
            round(self.hold.bound_s * 1000, 1),
            held,
            reasons,
            self.holds,
            self.hold.batch_seats,
            limited,
            tuple(f"interactive work on {self.limited[name]}" for name in limited),
            tuple(sorted(self.stopped)),
            self.pauses,
            round(self.paused_s + sum(now - at for at in self.stopped.values()), 3),
        )
