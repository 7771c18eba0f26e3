"""The body budget: bytes held by requests not yet sent to the engine, bounded."""

from __future__ import annotations

from llmd.admission.bodies import BodyBudget


def test_a_reservation_past_the_limit_is_refused_until_bytes_are_given_back() -> None:
    """Limit 100: 60 then 40 fit, 1 more does not; releasing 60 lets 50 in; a release twice
    gives back once; a resize moves the held bytes."""
    budget = BodyBudget(100)
    first, second = budget.reserve(60), budget.reserve(40)
    assert first is not None and second is not None and budget.held == 100
    assert budget.reserve(1) is None
    first.release()
    first.release()
    assert budget.held == 40
    third = budget.reserve(50)
    assert third is not None and budget.held == 90
    third.resize(10)
    assert budget.held == 50
    second.release()
    third.release()
    assert budget.held == 0


def test_a_body_larger_than_the_budget_goes_when_nothing_is_held() -> None:
    """A request bigger than the whole budget is not refused forever: it fits an empty budget;
    0 is no limit."""
    budget = BodyBudget(100)
    big = budget.reserve(500)
    assert big is not None and budget.reserve(1) is None
    big.release()
    unlimited = BodyBudget(0)
    assert unlimited.reserve(10**9) is not None and unlimited.reserve(10**9) is not None


def test_the_budget_says_how_much_it_held_each_time_it_empties() -> None:
    """`on_drained` hears the peak since the budget was last empty, once per emptying, and
    not while bytes are still held."""
    peaks: list[int] = []
    budget = BodyBudget(0, on_drained=peaks.append)
    first, second = budget.reserve(60), budget.reserve(40)
    assert first is not None and second is not None
    first.release()
    assert peaks == []
    second.resize(70)
    second.release()
    second.release()
    assert peaks == [100]
    third = budget.reserve(5)
    assert third is not None
    third.release()
    assert peaks == [100, 5]


def test_a_share_grows_with_its_bytes_until_others_leave_no_room() -> None:
    """Limit 100 with 60 held elsewhere: an empty share grows to 40, not to 41 (refused,
    nothing changed); alone it grows past the limit; a released share grows no more."""
    budget = BodyBudget(100)
    other, share = budget.reserve(60), budget.reserve(0)
    assert other is not None and share is not None
    assert share.grow(30) and share.grow(40) and budget.held == 100
    assert not share.grow(41) and share.nbytes == 40 and budget.held == 100
    other.release()
    assert share.grow(500) and budget.held == 500
    share.release()
    assert share.grow(10) and budget.held == 0
