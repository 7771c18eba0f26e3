"""Each tenant's share of a pool's KV cache: the KV tokens its running requests hold there
(each priced by llmd/admission/cost.py), against `max_kv_tokens` and `max_kv_share` x the pool's
measured capacity (the smaller, when both are set). Pure.

**Guarantee** (property-tested in tests/admission/test_shares.py): the scheduler releases a
tenant's request on a pool only while what it holds there plus the request's cost stays
within its limit, or when it holds nothing there (so a tenant is never stuck: validation
refuses a request that alone is over the limit, `never_fits`). A tenant over its share waits in
the queue, as one at `max_concurrency` does, without holding up the others.
"""

from __future__ import annotations

import collections

from llmd.admission.entries import Entry
from llmd.admission.tenants import Tenant


class KvShares:
    """What each tenant's running requests hold per pool (`held`, KV tokens by (tenant,
    pool)), and each pool's measured KV capacity (`capacity`, tokens, kept from the last
    scrape that knew it)."""

    def __init__(self) -> None:
        self.held: collections.Counter[tuple[str, str]] = collections.Counter()
        self.capacity: dict[str, int] = {}

    def measured(self, pool: str, tokens: int | None) -> None:
        """Pool `pool`'s KV capacity is `tokens` (None: not known now; the last figure stays)."""
        if tokens:
            self.capacity[pool] = tokens

    def limit(self, tenant: Tenant, pool: str) -> int | None:
        """The KV tokens `tenant` may hold on `pool` (None: no limit, or a share of a pool
        whose capacity is not measured yet)."""
        limits = []
        if tenant.max_kv_tokens:
            limits.append(tenant.max_kv_tokens)
        capacity = self.capacity.get(pool)
        if tenant.max_kv_share and capacity:
            limits.append(int(tenant.max_kv_share * capacity))
        return min(limits, default=None)

    def fits(self, tenant: Tenant, pool: str, cost: int) -> bool:
        """Whether a request of `cost` KV tokens of `tenant` may start on `pool` now."""
        if not (tenant.max_kv_tokens or tenant.max_kv_share):
            return True
        held = self.held[(tenant.name, pool)]
        limit = self.limit(tenant, pool)
        return held == 0 or limit is None or held + cost <= limit

    def never_fits(self, tenant: Tenant, pool: str, cost: int) -> str | None:
        """Why a request of `cost` KV tokens could never start within `tenant`'s share of
        `pool` (its limit is smaller), or None."""
        limit = self.limit(tenant, pool)
        if limit is None or cost <= limit:
            return None
        return (
            f"its sequences may hold {cost:,} tokens of KV cache, more than tenant "
            f"{tenant.name}'s share of {limit:,}"
        )

    def take(self, entry: Entry) -> None:
        """`entry` was released: its tenant holds its cost on its pool."""
        self.held[(entry.tenant.name, entry.model)] += entry.cost

    def give(self, entry: Entry) -> None:
        """`entry` ended: its cost is free again."""
        key = (entry.tenant.name, entry.model)
        held = self.held.get(key, 0) - entry.cost  # not Counter's [] and del: Python calls
        if held > 0:
            self.held[key] = held
        else:
            self.held.pop(key, None)

    def held_by(self, tenant: str) -> int:
        """The KV tokens `tenant`'s running requests hold, over every pool."""
        return sum(tokens for (name, _), tokens in self.held.items() if name == tenant)
