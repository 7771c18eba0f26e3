"""Scenario J's pusher: a tenant over its quota beside the others. From partway through the
step, `users` requests at once go out under its own API key, in a closed loop; each 429 it gets
is answered by waiting its Retry-After (the recommendation of RFC 9110 10.2.3, what a good
client does) before it sends again. The figures: its 429s, the Retry-After it was given and how
long it waited, how often a request sent after waiting was refused again, and the other
tenants' TTFT before and while it pushes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence

import aiohttp

from llmd.bench.client import Call, RequestResult, Target, stream_completion
from llmd.bench.percentiles import ms_percentiles
from llmd.bench.prompts import PromptBuilder
from llmd.bench.scenarios import Scenario, plan_request

# A 429 without a Retry-After (an engine straight has no quota: none come) waits this long.
DEFAULT_WAIT_S = 1.0


@dataclasses.dataclass
class Pushed:
    """One step's pusher: its results; per 429 the Retry-After given (s) and, for each wait the
    step's end did not cut short, the time waited (s); when it started (results' clock)."""

    results: list[RequestResult] = dataclasses.field(default_factory=list)
    given_s: list[float] = dataclasses.field(default_factory=list)
    waits: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    started_s: float | None = None


async def push(
    pushed: Pushed,
    where: tuple[Target, aiohttp.ClientSession],
    send: Callable[[int], Call],
    until: Callable[[], bool],
    clock_zero: float,
    timeout_s: float,
    user: int,
) -> None:
    """One of the pusher's users: send `send(index)` requests (indexes from a million up, so
    they never meet the others') until `until()` says the step is over; after a 429 wait its
    Retry-After (or DEFAULT_WAIT_S), never past the step's end."""
    target, session = where
    index = 1_000_000 + user * 100_000
    while not until():
        result = RequestResult(index, "pusher", 0, 0, 0.0, user=-2 - user)
        await stream_completion(session, target, send(index), result, timeout_s, clock_zero)
        pushed.results.append(result)
        index += 1
        if result.error_kind is not None and result.error_kind.startswith("429"):
            wait = result.retry_after if result.retry_after is not None else DEFAULT_WAIT_S
            pushed.given_s.append(wait)
            began = time.perf_counter()
            while not until() and time.perf_counter() - began < wait:
                await asyncio.sleep(min(0.05, wait))
            if not until():
                pushed.waits.append((wait, time.perf_counter() - began))


def pusher_call(
    scenario: Scenario,
    prompts: PromptBuilder,
    model: str,
    seed: int,
    max_model_len: int | None,
    headers: tuple[tuple[str, str], ...],
) -> Callable[[int], Call]:
    """The pusher's request `index`: the scenario's plan for it, under `headers`."""

    def call(index: int) -> Call:
        plan = plan_request(scenario, seed, index, max_model_len)
        prompt = prompts.build(plan.prompt_tokens, random.Random(f"{seed}:push:{index}"))
        return Call(model, prompt, plan.output_tokens, headers=headers)

    return call


@dataclasses.dataclass(frozen=True)
class QuotaSummary:
    """A step of J: from `started_s` the pusher's `requests` (`ok`, `rejected_429`, other
    failures by kind), its answered requests per second, the Retry-After values it was given
    (s: min, median, max) and the share of its waits the step's end did not cut short that
    lasted the whole Retry-After (`honoured`: None when there was none), the share of requests
    sent after a wait
    that got a 429 again; the other tenants' TTFT (ms) before and during, and the ratio of
    their p95s (about 1 when the quota protected them)."""

    started_s: float | None
    requests: int
    ok: int
    rejected_429: int
    errors_by_kind: dict[str, int]
    ok_per_s: float
    retry_after_s: dict[str, float | None]
    honoured: float | None
    refused_again: float | None
    others_ttft_before_ms: dict[str, float | None]
    others_ttft_during_ms: dict[str, float | None]
    ttft_p95_during_over_before: float | None


def quota_summary(pushed: Pushed, others: Sequence[RequestResult], wall_s: float) -> QuotaSummary:
    """The figures of the pusher beside the step's other requests (`others`)."""
    results = pushed.results
    rejected = [r for r in results if (r.error_kind or "").startswith("429")]
    failed = [r for r in results if r.outcome != "ok" and r not in rejected]
    started = pushed.started_s if pushed.started_s is not None else float("inf")
    span = max(wall_s - (pushed.started_s or 0.0), 1e-9)
    given = sorted(pushed.given_s)
    honoured = [waited >= given - 0.01 for given, waited in pushed.waits]
    after_wait = _after_a_429(results)
    ttfts = [(r.start, r.ttft) for r in others if r.ttft is not None and r.outcome == "ok"]
    before = ms_percentiles([ttft for start, ttft in ttfts if start < started])
    during = ms_percentiles([ttft for start, ttft in ttfts if start >= started])
    p95_before, p95_during = before["p95"], during["p95"]
    return QuotaSummary(
        started_s=None if pushed.started_s is None else round(pushed.started_s, 3),
        requests=len(results),
        ok=sum(r.outcome == "ok" for r in results),
        rejected_429=len(rejected),
        errors_by_kind=dict(Counter(str(r.error_kind) for r in failed).most_common()),
        ok_per_s=round(sum(r.outcome == "ok" for r in results) / span, 3),
        retry_after_s={
            "min": given[0] if given else None,
            "median": given[len(given) // 2] if given else None,
            "max": given[-1] if given else None,
        },
        honoured=round(sum(honoured) / len(honoured), 3) if honoured else None,
        refused_again=(round(sum(after_wait) / len(after_wait), 3) if after_wait else None),
        others_ttft_before_ms=before,
        others_ttft_during_ms=during,
        ttft_p95_during_over_before=(
            round(p95_during / p95_before, 3) if p95_during is not None and p95_before else None
        ),
    )


def _after_a_429(results: Sequence[RequestResult]) -> list[bool]:
    """For each request a pusher user sent right after a 429 (and its wait): whether it got
    a 429 again."""
    by_user: dict[int, list[RequestResult]] = {}
    for result in results:
        by_user.setdefault(result.user, []).append(result)
    found = []
    for sent in by_user.values():
        for before, after in itertools.pairwise(sent):
            if (before.error_kind or "").startswith("429"):
                found.append((after.error_kind or "").startswith("429"))
    return found
