"""Admission's part of the Status: one queue row per class, one row per tenant (its requests,
its KV share, its token budgets)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping

from llmd.admission.budgets import Budgets
from llmd.admission.classes import Priority
from llmd.admission.scheduler import Scheduler
from llmd.admission.tenants import Tenant
from llmd.status import BudgetStatus, QueueStatus, TenantStatus


@dataclasses.dataclass(frozen=True)
class AdmissionSnapshot:
    """Admission's part of the Status: one queue row per class, one row per tenant."""

    queues: tuple[QueueStatus, ...]
    tenants: tuple[TenantStatus, ...]


def admission_snapshot(
    scheduler: Scheduler,
    budgets: Budgets,
    tenants: Iterable[Tenant],
    models: Iterable[str],
    now: float,
    in_flight: Mapping[str, int],
) -> AdmissionSnapshot:
    """The queues at `now` (monotonic s): depth and oldest wait per class; and one row per
    configured tenant (`tenants`) and per tenant in `in_flight` (requests relayed to the engine,
    by tenant) or queued: in flight, queued, and its limits (None: unlimited), its KV share
    summed over the pools of `models`."""
    oldest: dict[Priority, float] = {}
    queued: dict[str, int] = {}
    for entry in scheduler.entries():
        oldest[entry.cls] = min(oldest.get(entry.cls, now), entry.enqueued_at)
        queued[entry.tenant.name] = queued.get(entry.tenant.name, 0) + 1
    queues = tuple(
        QueueStatus(
            cls.label,
            depth=scheduler.queued(cls),
            oldest_wait_s=round(now - oldest[cls], 3) if cls in oldest else None,
        )
        for cls in Priority
    )
    limits = {tenant.name: tenant for tenant in tenants}
    models = list(models)
    rows = tuple(
        _tenant_row(
            scheduler,
            budgets,
            models,
            name,
            limits.get(name),
            in_flight.get(name, 0),
            queued.get(name, 0),
        )
        for name in sorted({*in_flight, *queued, *limits})
    )
    return AdmissionSnapshot(queues, rows)


def _tenant_row(
    scheduler: Scheduler,
    budgets: Budgets,
    models: list[str],
    name: str,
    tenant: Tenant | None,
    in_flight: int,
    queued: int,
) -> TenantStatus:
    """One tenant's Status row: its requests against its limits (None: unlimited), the KV
    tokens its running requests hold against its share (summed over the pools), and where it
    stands in each token budget."""
    shares, now = scheduler.shares, time.time()
    kv_limit = None
    if tenant is not None:
        limits = [shares.limit(tenant, model) for model in models]
        if limits and None not in limits:
            kv_limit = sum(limit or 0 for limit in limits)
    return TenantStatus(
        name,
        in_flight=in_flight,
        queued=queued,
        max_in_flight=tenant.max_concurrency or None if tenant else None,
        max_queued=tenant.max_queued or None if tenant else None,
        kv_tokens=shares.held_by(name),
        max_kv_tokens=kv_limit,
        budgets=tuple(
            BudgetStatus(s.budget.value, s.limit, s.remaining, round(s.reset_s, 1))
            for s in budgets.standings(name, now)
        ),
    )
