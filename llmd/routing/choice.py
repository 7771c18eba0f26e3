"""Which backend of a pool takes a request: the least loaded, or its prefix's affinity backend
while that one is not much busier than the rest. Pure.

**The rule.** Among the candidates (the pool's backends that can take the request now), with
`fill` each backend's load (llmd/routing/backend.py: the larger of its seat fill and KV fill):

- a request without a prefix key goes to the least-filled candidate;
- a request with a key has an affinity backend: the first candidate in the key's rendezvous
  order (highest random weight, Thaler & Ravishankar 1998: each (key, backend) pair hashed,
  highest first). It goes there unless

      fill(affinity) > (1 + epsilon) x mean fill of the candidates + slack / seats(affinity)

  and then to the least-filled candidate (ties in the key's rendezvous order, so a hot prefix
  spills to the same second backend).

**The bound.** The chosen backend's fill before the request is at most
(1 + epsilon) x the candidates' mean fill + slack requests' worth of its seats: the affinity
backend only within it, the least-filled one always (the minimum is at most the mean). With
loads balanced (every fill within the bound, e.g. all equal) every keyed request goes to its
affinity backend. Rendezvous order moves only the keys of a backend that leaves the candidates.

Sources:
- the bound: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018,
  arXiv 1608.01350), measured against the mean before the request, with `slack` in place of
  their rounding up. HAProxy's hash-balance-factor and brpc's c_murmurhash_bl implement it, brpc
  with a default of 1.25 x the mean: epsilon 0.25 here.
- the switch between affinity and least load: SGLang's cache-aware router
  (sgl-router/src/policies/cache_aware.rs: prefix match while balanced, shortest queue when
  max-min load is over an absolute and a relative threshold), with the test on the affinity
  backend alone.
- not followed: vLLM production-stack's prefix router (src/vllm_router/routers/routing_logic.py,
  PrefixAwareRouter) routes by longest prefix with no load bound; gateway-api-inference-extension
  (llm-d) adds a prefix-match score to queue and KV scores with weights, which bounds nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

from llmd.routing.backend import Backend


@dataclasses.dataclass(frozen=True)
class AffinityPolicy:
    """How much busier than the mean an affinity backend may be: `epsilon` (a ratio) and
    `slack` (requests' worth of its seats, so that at low load one request does not break the
    affinity). Raises ValueError for a negative or infinite value."""

    epsilon: float = 0.25
    slack: float = 1.0

    def __post_init__(self) -> None:
        if not (0 <= self.epsilon < float("inf") and 0 <= self.slack < float("inf")):
            raise ValueError(f"epsilon and slack must be finite and >= 0: {self}")


@dataclasses.dataclass(frozen=True)
class Choice:
    """The backend chosen; `affinity`: it is the request's affinity backend; `spilled`: the
    request had a key but its affinity backend was over the bound."""

    backend: str
    affinity: bool = False
    spilled: bool = False


def rendezvous_order(key: str, names: Iterable[str]) -> list[str]:
    """`names` in `key`'s rendezvous order: by a 64-bit BLAKE2b hash of (key, name), highest
    first. Removing a name leaves the others' order unchanged."""
    return sorted(names, key=lambda name: _weight(key, name), reverse=True)


def choose(candidates: Sequence[Backend], key: str | None, policy: AffinityPolicy) -> Choice | None:
    """The backend for a request with prefix `key` (None: no key) among `candidates` (those
    able to take it now; ties without a key go to the first in the order given), or None
    when there are none."""
    if not candidates:
        return None
    if key is None:
        return Choice(min(candidates, key=lambda backend: backend.fill).name)
    by_name = {backend.name: backend for backend in candidates}
    order = rendezvous_order(key, by_name)
    affinity = by_name[order[0]]
    mean = sum(backend.fill for backend in candidates) / len(candidates)
    if affinity.fill <= (1 + policy.epsilon) * mean + policy.slack * affinity.one_request:
        return Choice(affinity.name, affinity=True)
    least = min(order, key=lambda name: by_name[name].fill)
    return Choice(least, spilled=True)


def only_candidate(name: str, key: str | None) -> Choice:
    """What `choose` answers when backend `name` is the one candidate, without its load: it
    is the key's affinity backend (the first of a one-name rendezvous order), and within the
    bound, since its fill is at most (1 + epsilon) x itself (the mean) for epsilon >= 0; without
    a key it is the least filled. So a pool of one backend needs no view of its load."""
    return Choice(name, affinity=key is not None)


def _weight(key: str, name: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
