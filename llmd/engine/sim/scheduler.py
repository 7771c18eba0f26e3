"""The scheduler of continuous batching, as vLLM v1 runs it, without time or I/O (pure).

Each step: running sequences first (each gets its next token, or the next chunk of its prompt),
taking KV blocks as they grow and preempting when the pool is empty; then, only if nobody was
preempted, waiting sequences are admitted while seats (`max_num_seqs`), the step's token budget
(`max_num_batched_tokens`) and blocks allow. Under the priority policy the waiting queue is
ordered by (priority, arrival) and preemption picks the running sequence with the largest
(priority, arrival); under FCFS it picks the last admitted. A waiting sequence never preempts a
running one. A preempted sequence loses its blocks and recomputes prompt and output
(vllm/v1/core/sched/scheduler.py, 0.32).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import heapq
import itertools
from typing import Literal

from llmd.engine.sim.kv import BlockPool, blocks_for

FinishReason = Literal["length", "stop", "abort"]


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclasses.dataclass(eq=False)
class Sequence:
    """One request's sequence. Token counts, not token ids: the engine turns steps into text.

    `computed` counts tokens whose KV is in the cache; `generated` the output tokens so far.
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    priority: int = 0
    arrival: float = 0.0
    status: SeqStatus = SeqStatus.WAITING
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    finish_reason: FinishReason | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def pending(self) -> int:
        """Tokens to compute before the next output token can be sampled."""
        return self.total_tokens - self.computed


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """One sequence's share of a step: `tokens` computed; `decode` when it is a single-token
    decode rather than (part of) a prefill; `context` the tokens already in its KV cache."""

    seq: Sequence
    tokens: int
    decode: bool
    context: int = 0


@dataclasses.dataclass(frozen=True)
class Step:
    """What one engine step computes, and who was preempted to make room for it."""

    scheduled: tuple[Scheduled, ...]
    preempted: tuple[Sequence, ...] = ()

    @property
    def prefill_tokens(self) -> int:
        return sum(s.tokens for s in self.scheduled if not s.decode)

    @property
    def prefill_seqs(self) -> int:
        """Sequences with (a chunk of) their prompt in the step."""
        return sum(1 for s in self.scheduled if not s.decode)

    @property
    def decode_seqs(self) -> int:
        return sum(1 for s in self.scheduled if s.decode)

    @property
    def decode_context(self) -> int:
        """KV-cache tokens the step's decodes attend to, summed over them."""
        return sum(s.context for s in self.scheduled if s.decode)

    def __bool__(self) -> bool:
        return bool(self.scheduled)


@dataclasses.dataclass(frozen=True)
class Emitted:
    """A step's result for one sequence: it produced one token; `finished` says why it ended."""

    seq: Sequence
    finished: FinishReason | None


class Scheduler:
    """Waiting queue, running batch and KV pool of one engine."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        pool: BlockPool,
        policy: Literal["fcfs", "priority"] = "fcfs",
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.pool = pool
        self.policy = policy
        self.running: list[Sequence] = []
        self._fcfs: collections.deque[Sequence] = collections.deque()
        self._heap: list[tuple[int, float, int, Sequence]] = []
        self._order = itertools.count()
        self.num_preemptions = 0

    # --- queue -------------------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self._fcfs) if self.policy == "fcfs" else len(self._heap)

    @property
    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence (status WAITING)."""
        seq.status = SeqStatus.WAITING
        self._push(seq, front=False)

    def abort(self, seq: Sequence, reason: FinishReason = "abort") -> None:
        """End `seq` now wherever it is (running or waiting), freeing its blocks at once, with
        `reason`: 'abort' (the client left) or 'stop' (the API server saw a stop string; vLLM's
        frontend aborts the request in the engine core then). Idempotent."""
        if seq.status is SeqStatus.FINISHED:
            return
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        else:
            self._remove_waiting(seq)
        self._finish(seq, reason)

    def _push(self, seq: Sequence, *, front: bool) -> None:
        if self.policy == "fcfs":
            if front:
                self._fcfs.appendleft(seq)
            else:
                self._fcfs.append(seq)
        else:
            heapq.heappush(self._heap, (seq.priority, seq.arrival, next(self._order), seq))

    def _peek(self) -> Sequence | None:
        if self.policy == "fcfs":
            return self._fcfs[0] if self._fcfs else None
        return self._heap[0][3] if self._heap else None

    def _pop(self) -> Sequence:
        return self._fcfs.popleft() if self.policy == "fcfs" else heapq.heappop(self._heap)[3]

    def _remove_waiting(self, seq: Sequence) -> None:
        if self.policy == "fcfs":
            self._fcfs.remove(seq)
        else:
            self._heap = [entry for entry in self._heap if entry[3] is not seq]
            heapq.heapify(self._heap)

    # --- stepping ----------------------------------------------------------------------------

    def schedule(self) -> Step:
        """Plan the next step. Blocks are taken now; preempted sequences are back in the queue."""
        budget = self.max_num_batched_tokens
        planned: dict[Sequence, int] = {}
        preempted: list[Sequence] = []
        for seq in list(self.running):
            if budget <= 0:
                break
            if seq.status is not SeqStatus.RUNNING:
                continue  # preempted earlier in this loop
            tokens = min(seq.pending, budget)
            fits, returned = self._grow(seq, tokens, planned, preempted)
            budget += returned
            if not fits:
                break
            planned[seq] = tokens
            budget -= tokens
        if not preempted:
            while budget > 0 and len(self.running) < self.max_num_seqs:
                head = self._peek()
                if head is None:
                    break
                tokens = min(head.pending, budget)
                need = blocks_for(head.computed + tokens, self.pool.block_size) - head.blocks
                if not self.pool.try_take(need):
                    break
                self._pop()
                head.blocks += need
                head.status = SeqStatus.RUNNING
                self.running.append(head)
                planned[head] = tokens
                budget -= tokens
        scheduled = tuple(
            Scheduled(seq, tokens, seq.generated > 0 and seq.pending == 1, seq.computed)
            for seq, tokens in planned.items()
            if tokens > 0
        )
        return Step(scheduled=scheduled, preempted=tuple(preempted))

    def _grow(
        self, seq: Sequence, tokens: int, planned: dict[Sequence, int], preempted: list[Sequence]
    ) -> tuple[bool, int]:
        """Take the blocks `seq` needs for `tokens` more, preempting others until it fits.

        Returns whether it fits (False: `seq` itself was preempted) and the step tokens handed
        back by victims already planned in this step.
        """
        need = blocks_for(seq.computed + tokens, self.pool.block_size) - seq.blocks
        returned = 0
        while not self.pool.try_take(need):
            victim = (
                max(self.running, key=lambda s: (s.priority, s.arrival))
                if self.policy == "priority"
                else self.running[-1]
            )
            self._preempt(victim)
            returned += planned.pop(victim, 0)
            preempted.append(victim)
            if victim is seq:
                return False, returned
        seq.blocks += need
        return True, returned

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.give_back(seq.blocks)
        seq.blocks = 0
        seq.computed = 0
        seq.preemptions += 1
        self.num_preemptions += 1
        seq.status = SeqStatus.WAITING
        self._push(seq, front=True)

    def complete(self, step: Step) -> list[Emitted]:
        """Apply a finished step: advance each scheduled sequence still running; the tokens it
        produced, with the sequences that ended (their blocks freed). Sequences aborted or
        preempted while the step ran produce nothing."""
        emitted = []
        for item in step.scheduled:
            seq = item.seq
            if seq.status is not SeqStatus.RUNNING:
                continue
            seq.computed += item.tokens
            if seq.pending > 0:
                continue  # a prefill chunk with more to come
            seq.generated += 1
            finished: FinishReason | None = "length" if seq.generated >= seq.max_tokens else None
            if finished:
                self.running.remove(seq)
                self._finish(seq, finished)
            emitted.append(Emitted(seq, finished))
        return emitted

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        self.pool.give_back(seq.blocks)
        seq.blocks = 0
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
