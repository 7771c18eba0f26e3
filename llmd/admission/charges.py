"""A request's charge to its tenant's token budgets at admission, and what a client is told of
it: the refusal a budget's answer becomes (429 `budget_exceeded`, or 400 when it could never
pass) and OpenAI's x-ratelimit headers (llmd/admission/ratelimit.py). The ledger itself is
llmd/admission/budgets.py."""

from __future__ import annotations

import math

import structlog

from llmd.admission.budgets import Budgets, Charge
from llmd.admission.cost import Cost
from llmd.admission.ratelimit import ratelimit_headers
from llmd.admission.tenants import Tenant
from llmd.errors import BudgetExceeded, InvalidRequest

log = structlog.get_logger("llmd.admission")


def charge(budgets: Budgets, tenant: Tenant, cost: Cost, now: float) -> Charge:
    """Take a request of `cost` from `tenant`'s budgets at `now` (Unix s). Raises
    BudgetExceeded (429, with Retry-After from the refill and the refusing budget's
    x-ratelimit-* headers), InvalidRequest (400: it needs more than a budget's whole size)."""
    taken = budgets.charge(tenant.name, cost.input_tokens, cost.output_tokens, now)
    if isinstance(taken, Charge):
        return taken
    budget, needed = taken.budget.value, f"{taken.needed:,}"
    if taken.never:
        raise InvalidRequest(
            f"this request cannot be served: it needs {needed} tokens of tenant "
            f"{tenant.name}'s {budget} budget, more than its whole {taken.limit:,}; lower "
            "max_tokens or the prompt"
        )
    log.info("request_rejected", tenant=tenant.name, reason=BudgetExceeded.code, budget=budget)
    raise BudgetExceeded(
        f"tenant {tenant.name} is over its {budget} budget ({taken.limit:,}): this request "
        f"needs {needed} tokens there, {taken.left:,} are left; retry in "
        f"{max(1, math.ceil(taken.wait_s))} s",
        retry_after_s=taken.wait_s,
        ratelimit=headers(budgets, tenant.name, now, budget),
    )


def headers(
    budgets: Budgets, tenant: str, now: float, budget: str | None = None
) -> list[tuple[bytes, bytes]]:
    """The x-ratelimit-*-tokens headers of `tenant`'s `budget` (None: the one with the fewest
    tokens left) at `now`; none for a tenant without budgets."""
    if budget is None:
        chosen = budgets.tightest(tenant, now)
    else:
        chosen = next((s for s in budgets.standings(tenant, now) if s.budget == budget), None)
    return ratelimit_headers(chosen) if chosen is not None else []
