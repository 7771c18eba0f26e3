"""The routing rule: least load, prefix affinity while the affinity backend is within the load
bound, and the bound itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.routing.backend import Backend, BackendKind
from llmd.routing.choice import AffinityPolicy, Choice, choose, only_candidate, rendezvous_order

POLICY = AffinityPolicy(epsilon=0.25, slack=1.0)
NAMES = [f"engine-{i}" for i in range(6)]


def backend(name: str, in_flight: int, seats: int = 10) -> Backend:
    return Backend(name, BackendKind.ENGINE, ("m",), seats=seats, in_flight=in_flight)


def key_with_affinity(name: str, names: list[str]) -> str:
    """A prefix key whose rendezvous order over `names` starts with `name`."""
    return next(k for i in range(1000) if rendezvous_order(k := f"key-{i}", names)[0] == name)


def test_no_key_goes_to_the_least_filled() -> None:
    """Without a prefix key the least-filled candidate wins (ties: the first given)."""
    pool = [backend("a", 4), backend("b", 2), backend("c", 2)]
    assert choose(pool, None, POLICY) == Choice("b")


def test_affinity_within_the_bound_and_spill_past_it() -> None:
    """The affinity backend keeps its prefix while at most (1+eps) x mean + one request; past
    that the request goes to the least filled."""
    key = key_with_affinity("a", ["a", "b"])
    # mean 0.25, bound 1.25 * 0.25 + 0.1 = 0.4125: 0.3 is within
    assert choose([backend("a", 3), backend("b", 2)], key, POLICY) == Choice("a", affinity=True)
    # mean 0.3, bound 0.475: 0.5 is over
    spilled = choose([backend("a", 5), backend("b", 1)], key, POLICY)
    assert spilled == Choice("b", spilled=True)


def test_slack_keeps_affinity_at_low_load() -> None:
    """One request already running on the affinity backend does not push the next away."""
    key = key_with_affinity("a", ["a", "b"])
    assert choose([backend("a", 1), backend("b", 0)], key, POLICY) == Choice("a", affinity=True)
    strict = AffinityPolicy(epsilon=0.25, slack=0.0)
    assert choose([backend("a", 1), backend("b", 0)], key, strict) == Choice("b", spilled=True)


def test_no_candidates_no_choice() -> None:
    """With no backend able to take the request there is no choice (the caller answers 503
    with the pool's Retry-After, see PoolCapacity.retry_after_s)."""
    assert choose([], "key", POLICY) is None
    assert choose([], None, POLICY) is None


def test_spill_ties_follow_the_keys_order() -> None:
    """A hot prefix spills to the same backend each time when the others are equally filled."""
    names = ["a", "b", "c"]
    key = key_with_affinity("a", names)
    second = rendezvous_order(key, names)[1]
    pool = [backend("a", 9), backend("b", 1), backend("c", 1)]
    assert choose(pool, key, POLICY) == Choice(second, spilled=True)


loads = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 128)), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(loads, st.text(min_size=1, max_size=8), st.floats(0, 2), st.floats(0, 4))
def test_the_bound_is_never_exceeded(
    figures: list[tuple[int, int]], key: str, epsilon: float, slack: float
) -> None:
    """Whatever the loads, the chosen backend's fill is at most (1+eps) x the candidates' mean
    fill plus slack requests of its seats."""
    policy = AffinityPolicy(epsilon, slack)
    pool = [backend(NAMES[i], n, seats) for i, (n, seats) in enumerate(figures)]
    mean = sum(b.fill for b in pool) / len(pool)
    for request_key in (key, None):
        choice = choose(pool, request_key, policy)
        assert choice is not None
        chosen = next(b for b in pool if b.name == choice.backend)
        assert chosen.fill <= (1 + epsilon) * mean + slack * chosen.one_request + 1e-12


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.integers(0, 128), st.text(min_size=1, max_size=8))
def test_affinity_holds_when_loads_are_balanced(size: int, in_flight: int, key: str) -> None:
    """Equal loads: every keyed request goes to its affinity backend, whatever the key."""
    pool = [backend(name, in_flight) for name in NAMES[:size]]
    choice = choose(pool, key, POLICY)
    assert choice == Choice(rendezvous_order(key, NAMES[:size])[0], affinity=True)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=8), st.integers(0, 5))
def test_a_backend_leaving_moves_only_its_own_keys(key: str, leaving: int) -> None:
    """Rendezvous order: removing a backend changes the affinity only of keys it held."""
    before = rendezvous_order(key, NAMES)[0]
    after = rendezvous_order(key, [n for n in NAMES if n != NAMES[leaving]])[0]
    assert after == before or before == NAMES[leaving]


def test_keys_spread_over_the_backends() -> None:
    """Affinity backends of many keys are spread about evenly (hash quality)."""
    counts = dict.fromkeys(NAMES[:4], 0)
    for i in range(4000):
        counts[rendezvous_order(f"prefix-{i}", NAMES[:4])[0]] += 1
    assert all(800 < n < 1200 for n in counts.values()), counts


def test_policy_refuses_negative_or_infinite_values() -> None:
    """An infinite epsilon would make the bound NaN at zero load (inf x 0): refused."""
    for epsilon, slack in ((-0.1, 1.0), (float("inf"), 1.0), (0.25, -1.0), (0.25, float("nan"))):
        with pytest.raises(ValueError, match="epsilon"):
            AffinityPolicy(epsilon, slack)


@settings(max_examples=200, deadline=None)
@given(
    in_flight=st.integers(0, 50),
    seats=st.integers(1, 50),
    key=st.none() | st.text(max_size=20),
    epsilon=st.floats(0, 10),
    slack=st.floats(0, 10),
)
def test_one_candidate_is_chosen_as_only_candidate_says(
    in_flight: int, seats: int, key: str | None, epsilon: float, slack: float
) -> None:
    """With one candidate, whatever its load, key and policy, `choose` answers what
    `only_candidate` answers without its load (a pool of one needs no view of it)."""
    policy = AffinityPolicy(epsilon=epsilon, slack=slack)
    one = backend("a", in_flight, seats)
    assert choose([one], key, policy) == only_candidate("a", key)
