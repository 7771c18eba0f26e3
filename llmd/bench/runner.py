"""A whole bench run: discover the model, warm up, sweep concurrency over each target, and
gather the figures, operating points and direct/llmd ratios into one `BenchReport`.

With a direct target, each step runs straight to vLLM and through llmd, one after the other (the
first one alternating from step to step), at the same concurrency and with the same requests (the
plan is a function of seed and request index), so the two sweeps see the same load and the same
engine warmth to within one step.
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any, Protocol

from llmd import __version__
from llmd.bench.client import (
    Call,
    EmbedCall,
    RequestResult,
    Target,
    embed,
    fetch_json,
    stream_completion,
)
from llmd.bench.leavers import hangup_summary
from llmd.bench.load import StepRun, StepSpec, run_step
from llmd.bench.prompts import PromptBuilder
from llmd.bench.quota import quota_summary
from llmd.bench.sampler import GaugeSampler
from llmd.bench.scenarios import Scenario
from llmd.bench.stats import (
    OperatingPoint,
    StepSummary,
    indexing_summary,
    operating_point,
    ratios,
    summarize,
)
from llmd.errors import BenchError, TargetUnavailable

# Above this share of one core, the bench process may be what limits the figures.
CLIENT_CPU_WARN_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """Everything a run needs, typed (the CLI builds it from its flags). `embed_model`: where
    H's embeddings go (a model llmd serves with a pooling engine); `embed_direct_url`: that
    engine straight, the direct run's target for them."""

    url: str
    scenario: Scenario
    concurrencies: tuple[int, ...] = (1,)
    duration_s: float = 30.0
    max_requests: int = 10_000
    seed: int = 0
    timeout_s: float = 300.0
    slo_ttft_p95_ms: float = 1000.0
    direct_url: str | None = None
    metrics_url: str | None = None
    model: str | None = None
    tokenizer: Path | None = None
    warmup: int = 2
    api_key: str | None = None
    priority: str | None = None
    metrics_interval_s: float = 0.5
    embed_model: str | None = None
    embed_direct_url: str | None = None
    pusher_api_key: str | None = None  # J: the over-quota tenant's key


class Display(Protocol):
    """What a run reports as it goes (the terminal display implements it; tests pass none)."""

    def step_started(self, target: str, concurrency: int, spec: StepSpec) -> None: ...
    def request_done(self, result: RequestResult) -> None: ...
    def step_finished(self, summary: StepSummary) -> None: ...


@dataclasses.dataclass
class BenchReport:
    """All figures of a run, per target label ("direct", "llmd", or "target" when alone)."""

    options: BenchOptions
    model: str
    max_model_len: int | None
    tokenizer: str | None
    started_at: float
    steps: dict[str, list[StepSummary]]
    operating_points: dict[str, OperatingPoint]
    ratios: list[dict[str, float | int | None]]
    client_warning: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON document `--output` writes."""
        options = self.options
        return {
            "llmd_version": __version__,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started_at)),
            "scenario": {
                "name": options.scenario.name,
                "title": options.scenario.title,
                "lengths": options.scenario.mix.describe(),
                "think_s": options.scenario.think_s,
                "burst_every_s": options.scenario.burst_every_s,
                "disconnect_share": options.scenario.disconnect_share,
                "shared_prefix_tokens": options.scenario.shared_prefix_tokens,
                "priority": options.scenario.priority,
                "indexing": _indexing_json(options),
                "hangup": _plain(options.scenario.hangup),
                "pusher": _plain(options.scenario.pusher),
            },
            "options": {
                "url": options.url,
                "direct_url": options.direct_url,
                "metrics_url": options.metrics_url,
                "concurrencies": list(options.concurrencies),
                "duration_s": options.duration_s,
                "max_requests": options.max_requests,
                "seed": options.seed,
                "timeout_s": options.timeout_s,
                "slo_ttft_p95_ms": options.slo_ttft_p95_ms,
                "warmup": options.warmup,
                "embed_model": options.embed_model,
                "embed_direct_url": options.embed_direct_url,
            },
            "model": self.model,
            "max_model_len": self.max_model_len,
            "tokenizer": self.tokenizer,
            "targets": {
                label: {
                    "steps": [dataclasses.asdict(s) for s in steps],
                    "operating_point": dataclasses.asdict(self.operating_points[label]),
                }
                for label, steps in self.steps.items()
            },
            "ratios_llmd_over_direct": self.ratios,
            "client_warning": self.client_warning,
        }


def _plain(value: Any) -> dict[str, Any] | None:
    return None if value is None else dataclasses.asdict(value)


def _indexing_json(options: BenchOptions) -> dict[str, Any] | None:
    indexing = options.scenario.indexing
    if indexing is None:
        return None
    return {**dataclasses.asdict(indexing), "lengths": str(indexing.lengths)}


def step_summary(label: str, concurrency: int, run: StepRun) -> StepSummary:
    """The figures of one step `run` against target `label`, with its scenario's own: H's
    indexing, I's hang-up, J's pusher."""
    return summarize(
        label,
        concurrency,
        run.results,
        run.wall_s,
        run.samples,
        run.client_cpu_s,
        indexing=(
            indexing_summary(run.results, run.embed_results, run.indexing_at_s)
            if run.indexing_at_s is not None
            else None
        ),
        hangup=hangup_summary(run.wave, run.results) if run.wave is not None else None,
        quota=quota_summary(run.pushed, run.results, run.wall_s) if run.pushed else None,
    )


def targets_of(options: BenchOptions) -> list[Target]:
    """The targets in the order each step visits them: direct first when there is one."""
    if options.direct_url is None:
        return [Target.parse("target", options.url)]
    return [Target.parse("direct", options.direct_url), Target.parse("llmd", options.url)]


async def discover(
    options: BenchOptions, target: Target, auth: tuple[tuple[str, str], ...] = ()
) -> tuple[str, int | None, PromptBuilder, str | None]:
    """(model, max_model_len, prompt builder, tokenizer dir) from `/v1/models` (asked with
    `auth`, the API key's header) and the options.
    The tokenizer is `--tokenizer`, else the model's `root` when that directory is on this
    machine with a tokenizer.json (vLLM's /v1/models gives the model path as `root`)."""
    async with target.session(timeout_s=30) as session:
        listing = await fetch_json(session, target, "/v1/models", auth)
    models = listing.get("data") or [] if isinstance(listing, dict) else []
    if not models:
        raise TargetUnavailable(f"{target.url}/v1/models lists no model")
    chosen = next((m for m in models if m.get("id") == options.model), None)
    if options.model is not None and chosen is None:
        names = ", ".join(str(m.get("id")) for m in models)
        raise BenchError(f"model {options.model!r} not served at {target.url} (it has {names})")
    chosen = chosen or models[0]
    tokenizer = options.tokenizer
    root = chosen.get("root")
    if tokenizer is None and isinstance(root, str) and (Path(root) / "tokenizer.json").exists():
        tokenizer = Path(root)
    max_model_len = chosen.get("max_model_len")
    return (
        str(chosen["id"]),
        int(max_model_len) if max_model_len else None,
        PromptBuilder(tokenizer),
        str(tokenizer) if tokenizer else None,
    )


async def warm_up(
    target: Target,
    model: str,
    prompts: PromptBuilder,
    count: int,
    auth: tuple[tuple[str, str], ...] = (),
) -> None:
    """`count` small requests (with `auth`, the API key's header), not measured; raises
    `TargetUnavailable` if the target cannot serve."""
    async with target.session(timeout_s=60) as session:
        for index in range(count):
            prompt = prompts.build(16, random.Random(f"warmup:{index}"))
            call = Call(model, prompt, 16, headers=auth)
            result = RequestResult(-1, "warmup", 16, 16, 0.0)
            await stream_completion(session, target, call, result, 120, time.perf_counter())
            if result.outcome != "ok":
                raise TargetUnavailable(
                    f"warm-up request to {target.url} failed: {result.error_kind}"
                )


def embed_targets_of(options: BenchOptions, targets: list[Target]) -> dict[str, Target]:
    """Where each target's embeddings go in H (by target label): the direct run's to
    `embed_direct_url`, the others' to their own URL. Raises `BenchError` when H lacks
    `embed_model`, or a direct run its `embed_direct_url`."""
    if options.scenario.indexing is None:
        return {}
    if options.embed_model is None:
        raise BenchError(
            f"scenario {options.scenario.name} sends embeddings: give --embed-model NAME, a model "
            "served by a pooling engine (vLLM --runner pooling)"
        )
    if options.direct_url is not None and options.embed_direct_url is None:
        raise BenchError(
            "the direct run needs the pooling engine straight too: give --embed-direct URL or "
            "--embed-direct-uds PATH"
        )
    return {
        target.label: (
            Target.parse("embed-direct", options.embed_direct_url)
            if target.label == "direct" and options.embed_direct_url
            else target
        )
        for target in targets
    }


async def warm_up_embeddings(
    target: Target, model: str, auth: tuple[tuple[str, str], ...] = ()
) -> None:
    """One small embeddings request (with `auth`), not measured; raises `BenchError` if the
    target cannot serve it (a model it does not serve, an engine that does not pool)."""
    async with target.session(timeout_s=60) as session:
        result = RequestResult(-1, "warmup", 2, 0, 0.0)
        call = EmbedCall(model, ("warm up",), auth)
        await embed(session, target, call, result, 120, time.perf_counter())
    if result.outcome != "ok":
        raise BenchError(
            f"warm-up embeddings of {model} at {target.url} failed: {result.error_kind}"
        )


Headers = tuple[tuple[str, str], ...]


def request_headers(options: BenchOptions, auth: Headers) -> tuple[Headers, Headers]:
    """The headers of the measured requests and of H's embeddings: `auth` (the API key's) and
    `x-llmd-priority`: `--priority`, else the scenario's (H: interactive), and the indexing's
    (H: batch) for the embeddings."""
    priority = options.priority or options.scenario.priority
    indexing = options.scenario.indexing
    embed_priority = indexing.priority if indexing is not None else None
    return (
        auth + ((("x-llmd-priority", priority),) if priority else ()),
        auth + ((("x-llmd-priority", embed_priority),) if embed_priority else ()),
    )


def pusher_headers(options: BenchOptions, headers: Headers) -> Headers:
    """The headers of J's pusher: the others' with its own API key in place of theirs."""
    if options.pusher_api_key is None:
        return headers
    kept = tuple((name, value) for name, value in headers if name.lower() != "authorization")
    return (("Authorization", f"Bearer {options.pusher_api_key}"), *kept)


async def run_bench(options: BenchOptions, display: Display | None = None) -> BenchReport:
    """Run the whole bench. Raises `BenchError` when a target cannot be used at all."""
    started_at = time.time()
    targets = targets_of(options)
    embeds = embed_targets_of(options, targets)
    auth = (("Authorization", f"Bearer {options.api_key}"),) if options.api_key else ()
    model, max_model_len, prompts, tokenizer = await discover(options, targets[0], auth)
    metrics = Target.parse("metrics", options.metrics_url) if options.metrics_url else targets[0]
    single = options.scenario.single
    if not single:
        for target in targets:
            await warm_up(target, model, prompts, options.warmup, auth)
    for target in embeds.values():
        assert options.embed_model is not None  # embed_targets_of checked it
        await warm_up_embeddings(target, options.embed_model, auth)
    headers, embed_headers = request_headers(options, auth)
    indexing = options.scenario.indexing
    steps: dict[str, list[StepSummary]] = {t.label: [] for t in targets}
    for concurrency in (1,) if single else options.concurrencies:
        spec = StepSpec(
            scenario=options.scenario,
            concurrency=concurrency,
            duration_s=options.duration_s,
            max_requests=1 if single else options.max_requests,
            seed=options.seed,
            timeout_s=options.timeout_s,
            model=model,
            max_model_len=max_model_len,
            headers=headers,
            embed_model=options.embed_model if indexing is not None else None,
            embed_headers=embed_headers,
            pusher_headers=pusher_headers(options, headers),
        )
        # Alternate which target goes first, so slow drift (engine warmth, other load on the
        # machine) does not always favour the same one.
        order = targets if len(steps[targets[0].label]) % 2 == 0 else targets[::-1]
        for target in order:
            if display is not None:
                display.step_started(target.label, concurrency, spec)
            sources = [metrics] if target.url == metrics.url else [metrics, target]
            sampler = GaugeSampler(sources, options.metrics_interval_s)
            run = await run_step(
                target,
                spec,
                prompts,
                sampler,
                display.request_done if display else None,
                embeds.get(target.label),
            )
            summary = step_summary(target.label, concurrency, run)
            steps[target.label].append(summary)
            if display is not None:
                display.step_finished(summary)
    points = {label: operating_point(s, options.slo_ttft_p95_ms) for label, s in steps.items()}
    busiest = max(
        (s for sweep in steps.values() for s in sweep),
        key=lambda s: s.client_cpu_share,
        default=None,
    )
    warnings = []
    if busiest is not None and busiest.client_cpu_share > CLIENT_CPU_WARN_SHARE:
        warnings.append(
            f"the bench process used {100 * busiest.client_cpu_share:.0f}% of a core at "
            f"{busiest.target} concurrency {busiest.concurrency}: it may limit the figures"
        )
    off = sum(s.prompt_mismatches for sweep in steps.values() for s in sweep)
    if tokenizer is not None and off:
        warnings.append(
            f"{off} prompts were counted differently by the engine than by the tokenizer in "
            f"{tokenizer}: is it the served model's? (prompt lengths are approximate)"
        )
    warning = "; ".join(warnings) or None
    return BenchReport(
        options=options,
        model=model,
        max_model_len=max_model_len,
        tokenizer=tokenizer,
        started_at=started_at,
        steps=steps,
        operating_points=points,
        ratios=ratios(steps["direct"], steps["llmd"]) if "direct" in steps else [],
        client_warning=warning,
    )
