"""Tenants' shares of a pool's KV cache, by properties: what a tenant's running requests hold
never passes its share (unless one request alone does, which validation refuses), a tenant
over its share waits without holding up others, and one that holds nothing is never stuck."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Entry, State
from llmd.admission.scheduler import Scheduler
from llmd.admission.shares import KvShares
from llmd.admission.tenants import Tenant
from tests.admission.test_scheduler import pool_slots

POLICIES = {cls: ClassPolicy(100_000, 1e9, 2.0 * int(cls)) for cls in Priority}
TENANTS = [
    Tenant("tokens", max_kv_tokens=3000),
    Tenant("share", max_kv_share=0.25),  # of a pool of 8,000 tokens: 2,000
    Tenant("both", max_kv_tokens=5000, max_kv_share=0.5, max_concurrency=2),
    Tenant("free"),
]
CAPACITY = {"small": 8000, "big": 20_000}
action = st.one_of(
    st.tuples(
        st.just("submit"),
        st.sampled_from(TENANTS),
        st.sampled_from(list(Priority)),
        st.integers(1, 2500),
        st.sampled_from(list(CAPACITY)),
    ),
    st.tuples(st.just("finish"), st.integers(0, 1000)),
    st.tuples(st.just("tick"), st.floats(0.0, 3.0)),
)


def test_a_share_is_the_smaller_of_tokens_and_fraction_and_waits_for_a_measure() -> None:
    """`limit` is max_kv_tokens, max_kv_share x the pool's capacity, or the smaller of both; a
    share of a pool not measured yet is no limit; a capacity once measured is kept."""
    shares = KvShares()
    both = Tenant("b", max_kv_tokens=5000, max_kv_share=0.5)
    assert shares.limit(both, "p") == 5000
    assert shares.limit(Tenant("s", max_kv_share=0.5), "p") is None
    shares.measured("p", 8000)
    shares.measured("p", None)
    assert shares.limit(both, "p") == 4000 and shares.limit(Tenant("f"), "p") is None
    assert shares.never_fits(both, "p", 4001) is not None
    assert shares.never_fits(both, "p", 4000) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(action, max_size=150))
def test_running_requests_never_hold_more_than_the_share(slots: int, actions: list[tuple]) -> None:  # type: ignore[type-arg]
    """Under any submits (two pools, every class), finishes and time: on each pool, the KV
    tokens a tenant's running requests hold stay within its share unless a single request
    runs; the scheduler's count of them is exact; and a tenant's entry waits on a pool only
    while the pool is busy or the tenant holds something there."""
    scheduler = Scheduler(POLICIES)
    for pool, tokens in CAPACITY.items():
        scheduler.shares.measured(pool, tokens)
    gate = pool_slots(dict.fromkeys(CAPACITY, slots))
    now = 0.0
    released: list[Entry] = []
    for act in actions:
        if act[0] == "submit":
            _, tenant, cls, cost, pool = act
            assert scheduler.submit(Entry(tenant, cls, cost, model=pool), now) is None
        elif act[0] == "finish":
            running = [e for e in released if e.state is State.RELEASED]
            if running:
                entry = running[act[1] % len(running)]
                scheduler.finish(entry)
                gate.on_finish(entry)
        else:
            now += act[1]
        released += scheduler.decide(now, gate).released
        running = [e for e in released if e.state is State.RELEASED]
        for tenant in TENANTS:
            for pool in CAPACITY:
                mine = [e for e in running if e.tenant is tenant and e.model == pool]
                held = sum(e.cost for e in mine)
                assert scheduler.shares.held[(tenant.name, pool)] == held
                limit = scheduler.shares.limit(tenant, pool)
                assert limit is None or held <= limit or len(mine) == 1, (tenant, pool, mine)
        for entry in scheduler.entries():
            tenant, pool = entry.tenant, entry.model
            at_concurrency = tenant.max_concurrency and (
                scheduler.in_flight[tenant.name] >= tenant.max_concurrency
            )
            assert (
                gate.gates[pool].in_flight > 0
                or at_concurrency
                or scheduler.shares.held[(tenant.name, pool)] > 0
            ), f"{entry} waits on an idle pool"


def test_a_tenant_over_its_share_waits_while_others_go_on() -> None:
    """The flooding tenant holds its share and no more; another tenant's request of the same
    class, sent after the flood, goes at once; the flood's next one goes when one of its own
    ends."""
    scheduler = Scheduler(POLICIES)
    gate = pool_slots({"m": 100})
    flood, chat = Tenant("flood", max_kv_tokens=2000), Tenant("chat")
    queued = [Entry(flood, Priority.NORMAL, 1000, model="m") for _ in range(5)]
    for entry in queued:
        scheduler.submit(entry, 0.0)
    first = scheduler.decide(0.0, gate).released
    assert first == queued[:2]
    late = Entry(chat, Priority.NORMAL, 1000, model="m")
    scheduler.submit(late, 1.0)
    assert scheduler.decide(1.0, gate).released == [late]
    scheduler.finish(first[0])
    gate.on_finish(first[0])
    assert scheduler.decide(2.0, gate).released == [queued[2]]
    assert scheduler.shares.held_by("flood") == 2000
