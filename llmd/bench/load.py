"""One step of load: `concurrency` users sending a scenario's requests to one target, and in
scenario H its indexers sending embeddings beside them, in I a share of the users hanging up
at once (llmd/bench/leavers.py), in J a tenant over its quota beside them (llmd/bench/quota.py).

A step stops sending at its duration or request cap and then waits for what is in flight (each
request bounded by its timeout). Its wall time runs from the first send to the last answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable

import aiohttp

from llmd.bench.client import Call, EmbedCall, RequestResult, Target, embed, stream_completion
from llmd.bench.leavers import HangupWave
from llmd.bench.prompts import PromptBuilder
from llmd.bench.quota import Pushed, push, pusher_call
from llmd.bench.sampler import GaugeSample, GaugeSampler
from llmd.bench.scenarios import Indexing, Scenario, plan_documents, plan_request


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """How one step runs: users, bounds (seconds, requests) and what every request carries;
    `embed_model` (and `embed_headers`, with the API key) the embeddings' in scenario H."""

    scenario: Scenario
    concurrency: int
    duration_s: float
    max_requests: int
    seed: int
    timeout_s: float
    model: str
    max_model_len: int | None
    headers: tuple[tuple[str, str], ...] = ()
    embed_model: str | None = None
    embed_headers: tuple[tuple[str, str], ...] = ()
    pusher_headers: tuple[tuple[str, str], ...] = ()  # J: the over-quota tenant's


@dataclasses.dataclass
class StepRun:
    """The raw outcome of a step: every request's result, wall and client CPU seconds, gauges;
    in H the embeddings' results apart and when indexing began (s, on the results' clock)."""

    results: list[RequestResult]
    wall_s: float
    client_cpu_s: float
    samples: list[GaugeSample]
    embed_results: list[RequestResult] = dataclasses.field(default_factory=list)
    indexing_at_s: float | None = None
    wave: HangupWave | None = None  # I
    pushed: Pushed | None = None  # J


class _Step:
    """The shared state of one step's users: next request index, deadline, burst signal."""

    def __init__(self, spec: StepSpec, clock_zero: float) -> None:
        self.spec = spec
        self.clock_zero = clock_zero
        self.deadline = clock_zero + spec.duration_s
        self.next_index = 0
        self.burst = asyncio.Event()
        self.results: list[RequestResult] = []
        self.next_embed = 0
        self.embed_results: list[RequestResult] = []
        self.users_done = False  # the chat users have stopped: the indexers stop too

    def take(self) -> int | None:
        """The next request index, or None when the step is over (time or count)."""
        cap = 1 if self.spec.scenario.single else self.spec.max_requests
        if time.perf_counter() >= self.deadline or self.next_index >= cap:
            return None
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    async def think(self, rng: random.Random) -> None:
        """Wait an exponential think time, cut short by a burst or the end of the step."""
        pause = rng.expovariate(1 / self.spec.scenario.think_s)
        remaining = self.deadline - time.perf_counter()
        burst = self.burst
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(burst.wait(), timeout=max(0.0, min(pause, remaining)))

    def take_embed(self) -> int | None:
        """The next embeddings request's index, or None once the step is over."""
        if self.users_done or time.perf_counter() >= self.deadline:
            return None
        index, self.next_embed = self.next_embed, self.next_embed + 1
        return index

    async def bursts(self, rng: random.Random) -> None:
        """Every exponential interval, wake every thinking user at once."""
        mean = self.spec.scenario.burst_every_s
        while True:
            await asyncio.sleep(rng.expovariate(1 / mean))
            fired, self.burst = self.burst, asyncio.Event()
            fired.set()


async def run_step(
    target: Target,
    spec: StepSpec,
    prompts: PromptBuilder,
    sampler: GaugeSampler | None = None,
    on_result: Callable[[RequestResult], None] | None = None,
    embed_target: Target | None = None,
) -> StepRun:
    """Run one step against `target` (its embeddings, in H, against `embed_target`, else
    `target`); `on_result` is called as each request ends."""
    scenario = spec.scenario
    async with target.session(spec.timeout_s) as session:
        clock_zero = time.perf_counter()
        cpu_zero = time.process_time()
        step = _Step(spec, clock_zero)
        if sampler is not None:
            sampler.start(clock_zero)
        shared = scenario.shared_prefix_tokens
        prefix = (
            prompts.build(shared, random.Random(f"{spec.seed}:shared-prefix")) if shared else ""
        )
        wave = HangupWave(scenario.hangup, spec.concurrency) if scenario.hangup else None

        async def user(number: int) -> None:
            rng = random.Random(f"{spec.seed}:user:{number}")
            if scenario.open_arrivals:
                await asyncio.sleep(rng.uniform(0, scenario.think_s))
            while (index := step.take()) is not None:
                plan = plan_request(scenario, spec.seed, index, spec.max_model_len)
                prompt_rng = random.Random(f"{spec.seed}:prompt:{index}")
                call = Call(
                    model=spec.model,
                    prompt=prompts.build(
                        plan.prompt_tokens,
                        prompt_rng,
                        prefix if plan.prompt_tokens > shared else "",
                    ),
                    max_tokens=plan.output_tokens,
                    disconnect_after=plan.disconnect_after,
                    headers=spec.headers,
                )
                result = RequestResult(
                    plan.index, plan.component, plan.prompt_tokens, plan.output_tokens, 0.0,
                    user=number,
                )  # fmt: skip
                sending = stream_completion(
                    session, target, call, result, spec.timeout_s, clock_zero
                )
                left = False
                if wave is not None and wave.leaves(number):
                    left = await wave.send(sending, result)
                else:
                    await sending
                step.results.append(result)
                if on_result is not None:
                    on_result(result)
                if left:
                    return  # hung up: this user sends nothing more
                if scenario.open_arrivals:
                    await step.think(rng)

        async def users() -> None:
            await asyncio.gather(
                *(user(n) for n in range(1 if scenario.single else spec.concurrency))
            )
            step.users_done = True

        bursts = (
            asyncio.create_task(step.bursts(random.Random(f"{spec.seed}:bursts")))
            if scenario.open_arrivals and scenario.burst_every_s > 0
            else None
        )
        indexing = scenario.indexing if spec.embed_model is not None else None
        indexing_at = clock_zero + spec.duration_s * (indexing.starts_at if indexing else 0.0)
        embeds = embed_target or target
        side: list[Awaitable[None]] = []
        if wave is not None:
            assert scenario.hangup is not None
            at = clock_zero + spec.duration_s * scenario.hangup.at
            side.append(wave.fire(at, clock_zero, sampler))
        pushed = Pushed() if scenario.pusher is not None else None
        if pushed is not None:
            side += _pushers(step, spec, prompts, (target, session), pushed)
        async with embeds.session(spec.timeout_s) as embed_session:
            indexers = [
                _index(step, spec, prompts, (embeds, embed_session), indexing_at, on_result)
                for _ in range(indexing.users if indexing else 0)
            ]
            await asyncio.gather(users(), *indexers, *side)
        if bursts is not None:
            bursts.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bursts
        wall_s = time.perf_counter() - clock_zero
        cpu_s = time.process_time() - cpu_zero
        samples = await sampler.stop() if sampler is not None else []
    first = min((r.start for r in step.results), default=0.0)
    indexing_at_s = indexing_at - clock_zero if step.embed_results else None  # results' clock
    return StepRun(
        sorted(step.results, key=lambda r: r.index),
        wall_s - first,
        cpu_s,
        samples,
        sorted(step.embed_results, key=lambda r: r.index),
        indexing_at_s,
        wave,
        pushed,
    )


def _pushers(
    step: _Step,
    spec: StepSpec,
    prompts: PromptBuilder,
    where: tuple[Target, aiohttp.ClientSession],
    pushed: Pushed,
) -> list[Awaitable[None]]:
    """J's pusher users, each starting at the pusher's share of the step."""
    pusher = spec.scenario.pusher
    assert pusher is not None
    start_at = step.clock_zero + spec.duration_s * pusher.starts_at
    pushed.started_s = start_at - step.clock_zero
    send = pusher_call(
        spec.scenario, prompts, spec.model, spec.seed, spec.max_model_len, spec.pusher_headers
    )

    def over() -> bool:
        return step.users_done or time.perf_counter() >= step.deadline

    async def user(number: int) -> None:
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        await push(pushed, where, send, over, step.clock_zero, spec.timeout_s, number)

    return [user(number) for number in range(pusher.users)]


async def _index(
    step: _Step,
    spec: StepSpec,
    prompts: PromptBuilder,
    where: tuple[Target, aiohttp.ClientSession],
    start_at: float,
    on_result: Callable[[RequestResult], None] | None,
) -> None:
    """One indexer of H: from `start_at` (perf_counter s), embeddings requests of the planned
    documents, one after the other, until the step is over."""
    indexing = spec.scenario.indexing
    assert indexing is not None and spec.embed_model is not None
    await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
    while (index := step.take_embed()) is not None:
        texts, tokens = documents(prompts, indexing, spec.seed, index, spec.max_model_len)
        call = EmbedCall(spec.embed_model, texts, spec.embed_headers)
        result = RequestResult(index, "embed", tokens, 0, 0.0)
        await embed(where[1], where[0], call, result, spec.timeout_s, step.clock_zero)
        step.embed_results.append(result)
        if on_result is not None:
            on_result(result)


def documents(
    prompts: PromptBuilder, indexing: Indexing, seed: int, index: int, max_model_len: int | None
) -> tuple[tuple[str, ...], int]:
    """The texts of embeddings request `index` (`plan_documents`'s lengths) and their planned
    tokens in all: the same for the same (indexing, seed, index) on every target."""
    lengths = plan_documents(indexing, seed, index, max_model_len)
    rng = random.Random(f"{seed}:document:{index}")
    return tuple(prompts.build(tokens, rng) for tokens in lengths), sum(lengths)
