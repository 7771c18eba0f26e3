"""The continuous-batching scheduler: seats, token budget, KV blocks, preemption, priority."""

from __future__ import annotations

from llmd.engine.sim.kv import BlockPool
from llmd.engine.sim.scheduler import Scheduler, SeqStatus, Sequence, Step


def make(
    *,
    seqs: int = 8,
    budget: int = 2048,
    blocks: int = 64,
    block_size: int = 16,
    policy: str = "fcfs",
) -> Scheduler:
    return Scheduler(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        pool=BlockPool(blocks, block_size),
        policy="priority" if policy == "priority" else "fcfs",
    )


def seq(
    name: str, prompt: int = 10, max_tokens: int = 5, priority: int = 0, at: float = 0.0
) -> Sequence:
    return Sequence(
        name, prompt_tokens=prompt, max_tokens=max_tokens, priority=priority, arrival=at
    )


def run_to_end(s: Scheduler, limit: int = 10_000) -> int:
    steps = 0
    while s.has_work and steps < limit:
        s.complete(s.schedule())
        steps += 1
    return steps


def until_preemption(s: Scheduler, limit: int = 100) -> Step:
    for _ in range(limit):
        step = s.schedule()
        if step.preempted:
            return step
        s.complete(step)
    raise AssertionError("no preemption")


def test_prefill_then_one_token_per_step() -> None:
    """A prompt is computed in one step that yields the first token; each decode step one more."""
    s = make()
    a = seq("a", prompt=10, max_tokens=3)
    s.add(a)
    first = s.schedule()
    assert [(x.tokens, x.decode) for x in first.scheduled] == [(10, False)]
    assert [e.finished for e in s.complete(first)] == [None]
    second = s.schedule()
    assert [(x.tokens, x.decode) for x in second.scheduled] == [(1, True)]
    s.complete(second)
    emitted = s.complete(s.schedule())
    assert emitted[0].finished == "length" and a.generated == 3
    assert a.status is SeqStatus.FINISHED and s.pool.used == 0


def test_long_prompt_is_chunked_by_the_token_budget() -> None:
    """A prompt over max_num_batched_tokens is prefilled in chunks, no token until it is done."""
    s = make(budget=8, blocks=64)
    a = seq("a", prompt=20, max_tokens=1)
    s.add(a)
    chunks = []
    while a.status is not SeqStatus.FINISHED:
        step = s.schedule()
        chunks.append(step.scheduled[0].tokens)
        s.complete(step)
    assert chunks == [8, 8, 4]


def test_max_num_seqs_caps_the_running_batch() -> None:
    """No more than max_num_seqs sequences run; the rest wait their turn."""
    s = make(seqs=2)
    for name in "abc":
        s.add(seq(name))
    s.schedule()
    assert len(s.running) == 2 and s.num_waiting == 1


def test_blocks_are_taken_as_sequences_grow_and_freed_when_done() -> None:
    """KV usage grows by whole blocks with the sequence and returns to zero at the end."""
    s = make(block_size=4, blocks=10)
    a = seq("a", prompt=4, max_tokens=5)
    s.add(a)
    s.complete(s.schedule())
    assert s.pool.used == 1  # 4 prompt tokens
    s.complete(s.schedule())  # computes token 5: a second block
    assert s.pool.used == 2
    run_to_end(s)
    assert s.pool.used == 0 and s.pool.usage == 0.0


def test_waiting_sequence_waits_for_blocks() -> None:
    """A new sequence is not admitted while its prompt's blocks are not free."""
    s = make(block_size=4, blocks=3)
    s.add(seq("a", prompt=8, max_tokens=2))
    s.complete(s.schedule())
    s.add(seq("b", prompt=8, max_tokens=2))
    step = s.schedule()
    assert [x.seq.request_id for x in step.scheduled] == ["a"]
    assert s.num_waiting == 1


def test_running_sequence_out_of_blocks_preempts_the_last_admitted_under_fcfs() -> None:
    """FCFS: when a running sequence needs a block and none is free, the newest one is
    preempted: its blocks are freed and it recomputes later."""
    s = make(block_size=4, blocks=4)
    a, b = seq("a", prompt=4, max_tokens=8), seq("b", prompt=4, max_tokens=8)
    s.add(a)
    s.add(b)
    step = until_preemption(s)  # both grow to 2 blocks (pool full), then a needs a third
    assert step.preempted == (b,)
    assert b.status is SeqStatus.WAITING and b.computed == 0 and b.blocks == 0
    assert b.preemptions == 1 and s.num_preemptions == 1
    run_to_end(s)
    assert a.generated == 8 and b.generated == 8 and s.pool.used == 0


def test_priority_policy_orders_the_waiting_queue() -> None:
    """Under the priority policy a lower `priority` value is admitted first, ties by arrival."""
    s = make(seqs=1, policy="priority")
    s.add(seq("late-urgent", priority=-1, at=2.0))
    s.add(seq("early", priority=0, at=0.0))
    s.add(seq("early-urgent", priority=-1, at=1.0))
    order = []
    while s.has_work:
        step = s.schedule()
        order.extend(x.seq.request_id for x in step.scheduled if x.seq.request_id not in order)
        s.complete(step)
    assert order == ["early-urgent", "late-urgent", "early"]


def test_waiting_high_priority_never_preempts_a_running_sequence() -> None:
    """A more urgent arrival waits for a seat; it does not take one from a running sequence."""
    s = make(seqs=1, policy="priority")
    low = seq("low", priority=5, max_tokens=4)
    s.add(low)
    s.complete(s.schedule())
    s.add(seq("urgent", priority=-10, at=1.0))
    step = s.schedule()
    assert [x.seq.request_id for x in step.scheduled] == ["low"]
    assert not step.preempted


def test_priority_preemption_picks_the_least_urgent_running() -> None:
    """Out of blocks under the priority policy, the running sequence with the largest
    (priority, arrival) is preempted, not the newest."""
    s = make(block_size=4, blocks=4, policy="priority")
    lax = seq("lax", prompt=4, max_tokens=8, priority=9, at=0.0)
    urgent = seq("urgent", prompt=4, max_tokens=8, priority=0, at=1.0)
    s.add(lax)
    s.add(urgent)
    step = until_preemption(s)
    assert step.preempted == (lax,)


def test_abort_frees_seat_and_blocks_at_once() -> None:
    """Aborting a running sequence returns its blocks and seat immediately; its step is void."""
    s = make()
    a = seq("a", prompt=40, max_tokens=100)
    s.add(a)
    step = s.schedule()
    assert s.pool.used > 0
    s.abort(a)
    assert s.pool.used == 0 and not s.running and a.finish_reason == "abort"
    assert s.complete(step) == []


def test_abort_of_a_waiting_sequence_removes_it_from_the_queue() -> None:
    """A waiting sequence that is aborted never runs."""
    for policy in ("fcfs", "priority"):
        s = make(seqs=1, policy=policy)
        a, b = seq("a"), seq("b")
        s.add(a)
        s.add(b)
        s.abort(b)
        assert s.num_waiting == 1
        run_to_end(s)
        assert b.generated == 0


def test_budget_handed_back_by_a_preempted_victim_is_reused() -> None:
    """Tokens planned for a victim preempted later in the same step go back to the budget."""
    s = make(block_size=4, blocks=6, budget=64, policy="priority")
    a = seq("a", prompt=4, max_tokens=20, priority=0, at=0)
    b = seq("b", prompt=4, max_tokens=20, priority=9, at=1)
    s.add(a)
    s.add(b)
    for _ in range(12):
        s.complete(s.schedule())
    assert s.num_preemptions >= 1
    run_to_end(s)
    assert a.generated == 20 and b.generated == 20 and s.pool.used == 0
