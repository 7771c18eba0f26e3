"""Each tenant's budgets: a request is charged to all of them or none, refunded whole when it
never ran, settled by what it used; a reload keeps what was spent, a restart takes it back."""

from __future__ import annotations

import math

from llmd.admission.budgets import Budget, Budgets, Charge, Refusal
from llmd.admission.tenants import Tenant

AGENT = Tenant("agent", input_tokens_per_minute=6000, output_tokens_per_minute=600,
               tokens_per_day=100_000)  # fmt: skip


def test_a_request_is_charged_to_every_budget_or_none() -> None:
    """Input to the input budget, output to the output one, both to the day's; a request one
    budget refuses takes nothing from the others, and is refused by the one it waits
    longest for; `holds` tells the tenants that have a budget."""
    budgets = Budgets()
    budgets.configure([AGENT, Tenant("free")], 0.0)
    charge = budgets.charge("agent", 1000, 500, 0.0)
    assert charge == Charge("agent", 1000, 500)
    left = {s.budget: s.remaining for s in budgets.standings("agent", 0.0)}
    assert left == {Budget.INPUT: 5000, Budget.OUTPUT: 100, Budget.DAY: 98_500}
    refused = budgets.charge("agent", 5000, 200, 0.0)
    assert isinstance(refused, Refusal) and refused.budget is Budget.OUTPUT
    assert (refused.needed, refused.left, refused.limit) == (200, 100, 600)
    assert math.isclose(refused.wait_s, 10.0)  # 100 tokens at 10 a second
    assert {s.budget: s.remaining for s in budgets.standings("agent", 0.0)} == left
    assert budgets.charge("free", 10**9, 10**9, 0.0) == Charge("free")
    assert budgets.standings("free", 0.0) == [] and budgets.tightest("free", 0.0) is None
    assert budgets.holds("agent") and not budgets.holds("free") and not budgets.holds("nobody")


def test_a_request_larger_than_a_budget_is_never_admitted() -> None:
    """Needing more than a budget's whole size: a Refusal that is `never` (answered 400)."""
    budgets = Budgets()
    budgets.configure([AGENT], 0.0)
    refused = budgets.charge("agent", 10, 601, 0.0)
    assert isinstance(refused, Refusal) and refused.never and refused.budget is Budget.OUTPUT


def test_refund_and_settle_give_back_what_was_not_used() -> None:
    """A request that never ran gets all back; one that ran spends its prompt and the output
    it produced, and the rest comes back to the output and day budgets."""
    budgets = Budgets()
    budgets.configure([AGENT], 0.0)
    first = budgets.charge("agent", 1000, 500, 0.0)
    assert isinstance(first, Charge)
    budgets.refund(first, 0.0)
    assert budgets.tightest("agent", 0.0) is not None
    assert {s.remaining for s in budgets.standings("agent", 0.0)} == {6000, 600, 100_000}
    second = budgets.charge("agent", 1000, 500, 0.0)
    assert isinstance(second, Charge)
    budgets.settle(second, 120, 0.0)
    left = {s.budget: s.remaining for s in budgets.standings("agent", 0.0)}
    assert left == {Budget.INPUT: 5000, Budget.OUTPUT: 480, Budget.DAY: 98_880}
    tightest = budgets.tightest("agent", 0.0)
    assert tightest is not None and tightest.budget is Budget.OUTPUT
    assert math.isclose(tightest.reset_s, 12.0)  # 120 tokens at 10 a second


def test_a_reload_keeps_what_was_spent_and_a_restart_restores_it() -> None:
    """configure() with the same tenant keeps its levels (shrunk budgets clamp them, a new
    budget starts full); export()/restore() carry them to a new ledger, which refills only by
    the time that passed."""
    budgets = Budgets()
    budgets.configure([AGENT], 0.0)
    charge = budgets.charge("agent", 3000, 0, 0.0)
    assert isinstance(charge, Charge)
    budgets.settle(charge, 0, 0.0)
    smaller = Tenant("agent", input_tokens_per_minute=2000, output_tokens_per_minute=600)
    budgets.configure([smaller], 0.0)
    left = {s.budget: s.remaining for s in budgets.standings("agent", 0.0)}
    assert left == {Budget.INPUT: 2000, Budget.OUTPUT: 600}
    budgets.configure([AGENT], 0.0)
    saved = budgets.export()
    fresh = Budgets()
    fresh.configure([AGENT], 30.0)
    fresh.restore(saved)
    left = {s.budget: s.remaining for s in fresh.standings("agent", 30.0)}
    assert left == {Budget.INPUT: 5000, Budget.OUTPUT: 600, Budget.DAY: 100_000}
