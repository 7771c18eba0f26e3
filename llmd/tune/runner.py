"""A whole tune run: for each setting, boot the engine alone with it, run the `llmd bench` load
against its socket while reading GPU memory, stop it; then the verdicts and the recommendation.

Each setting runs the same scenario with the same seeded requests, so the steps differ only in
the engine's setting. The load is `concurrency` users, by default as many as the setting's
--max-num-seqs (the seeds' table: each concurrency against its own setting).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from llmd import __version__
from llmd.bench.client import RequestResult
from llmd.bench.load import StepSpec
from llmd.bench.runner import BenchOptions, run_bench
from llmd.bench.scenarios import Scenario
from llmd.bench.stats import StepSummary
from llmd.config import Config, EngineConfig
from llmd.engine.args import with_flag
from llmd.gpu.nvml import GpuReader
from llmd.tune.engine import booted_engine
from llmd.tune.gpu import GpuPeak
from llmd.tune.settings import Setting
from llmd.tune.traffic import Traffic
from llmd.tune.verdict import Candidate, Recommendation, Verdict, recommend, verdict


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """Everything a run needs, typed (the CLI builds it from its flags). Times in seconds."""

    config: Config
    engine: str  # the name of the engine to tune, one of config.engine_tables
    settings: tuple[Setting, ...]
    scenario: Scenario
    slo_ttft_p95_ms: float
    concurrency: int | None = None
    duration_s: float = 30.0
    max_requests: int = 10_000
    timeout_s: float = 120.0
    seed: int = 0
    warmup: int = 2
    traffic: Traffic | None = None

    @property
    def table(self) -> EngineConfig:
        """The tuned engine's table: its model, args, GPUs and environment."""
        return self.config.engine_tables[self.engine]


def load_figures(s: StepSummary) -> dict[str, Any]:
    """A step's load figures as tune's JSON gives them (the whole bench step is beside)."""
    return {
        "concurrency": s.concurrency,
        "ttft_ms": s.ttft_ms,
        "e2e_ms": s.e2e_ms,
        "output_tokens_per_s": s.output_tokens_per_s,
        "requests_per_s": s.requests_per_s,
        "prefix_cache_hit_rate": s.prefix_cache_hit_rate,
        "requests": s.requests,
        "errors": s.errors,
        "timeouts": s.timeouts,
        "errors_by_kind": s.errors_by_kind,
    }


@dataclasses.dataclass(frozen=True)
class TuneStep:
    """One setting's figures: the args it booted with, its boot time (s), the bench step, the
    peak GPU memory (bytes; None without a GPU) and the verdict."""

    setting: Setting
    engine_args: tuple[str, ...]
    boot_s: float
    summary: StepSummary
    peak_gpu_memory_bytes: int | None
    gpu_memory_total_bytes: int | None
    verdict: Verdict
    within_slo: bool

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "setting": dataclasses.asdict(self.setting),
            "engine_args": list(self.engine_args),
            "boot_s": self.boot_s,
            **load_figures(s),
            "peak_running": s.peak_running,
            "peak_waiting": s.peak_waiting,
            "peak_kv_usage": s.peak_kv_usage,
            "peak_gpu_memory_bytes": self.peak_gpu_memory_bytes,
            "gpu_memory_total_bytes": self.gpu_memory_total_bytes,
            "verdict": self.verdict.word,
            "verdict_reason": self.verdict.reason,
            "within_slo": self.within_slo,
            "bench": dataclasses.asdict(s),
        }


@dataclasses.dataclass
class TuneReport:
    """A finished run: every step, the recommendation and the engine args it comes to."""

    options: TuneOptions
    started_at: float
    model: str
    steps: list[TuneStep]
    recommendation: Recommendation
    recommended_args: tuple[str, ...] | None
    gpu_note: str | None

    def to_json(self) -> dict[str, Any]:
        """The JSON document `--output` writes."""
        options, scenario = self.options, self.options.scenario
        traffic = options.traffic
        chosen = self.recommendation.setting
        return {
            "llmd_version": __version__,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started_at)),
            "config": options.config.source,
            "engine": {
                "name": options.engine,
                "kind": options.table.kind,
                "model": self.model,
                "args": list(options.table.args),
                "gpus": list(options.table.gpus),
            },
            "scenario": {
                "name": scenario.name,
                "title": scenario.title,
                "lengths": scenario.mix.describe(),
                "shared_prefix_tokens": scenario.shared_prefix_tokens,
            },
            "options": {
                "concurrency": options.concurrency or "each setting's --max-num-seqs",
                "duration_s": options.duration_s,
                "max_requests": options.max_requests,
                "timeout_s": options.timeout_s,
                "seed": options.seed,
                "slo_ttft_p95_ms": options.slo_ttft_p95_ms,
            },
            "gpu": {"note": self.gpu_note},
            "traffic": None
            if traffic is None
            else {
                "requests": len(traffic.pairs),
                "prompt_plus_output_p99": traffic.total_p99,
                "proposed_max_model_len": traffic.proposed_max_model_len,
            },
            "steps": [step.to_json() for step in self.steps],
            "recommendation": {
                "setting": dataclasses.asdict(chosen) if chosen else None,
                "reason": self.recommendation.reason,
                "engine_args": list(self.recommended_args) if self.recommended_args else None,
            },
        }


class TuneDisplay(Protocol):
    """What a run reports as it goes (the terminal display implements it; tests pass none)."""

    def setting_started(self, index: int, total: int, setting: Setting) -> None: ...
    def engine_ready(self, setting: Setting, boot_s: float) -> None: ...
    def step_started(self, target: str, concurrency: int, spec: StepSpec) -> None: ...
    def request_done(self, result: RequestResult) -> None: ...
    def step_finished(self, summary: StepSummary) -> None: ...


async def run_tune(
    options: TuneOptions, reader: GpuReader, display: TuneDisplay | None = None
) -> TuneReport:
    """Run every setting in turn. Raises `TuneError` when an engine does not boot (with the
    diagnosis of its output) and `BenchError` when its load cannot run."""
    started_at = time.time()
    table = options.table
    steps: list[TuneStep] = []
    gpu_note: str | None = None
    model = table.model_name
    for index, setting in enumerate(options.settings):
        if display is not None:
            display.setting_started(index, len(options.settings), setting)
        args = setting.engine_args(table.args)
        engine = dataclasses.replace(table, args=args)
        with tempfile.TemporaryDirectory(prefix="llmd-tune-", dir="/tmp") as runtime_dir:
            async with booted_engine(engine, Path(runtime_dir)) as booted:
                if display is not None:
                    display.engine_ready(setting, booted.boot_s)
                bench = _bench_options(options, f"unix:{booted.socket}", setting)
                async with GpuPeak(reader, engine) as gpu:
                    result = await run_bench(bench, display)
        summary = result.steps["target"][0]
        model = result.model
        gpu_note = gpu.note
        share = gpu.peak_bytes / gpu.total_bytes if gpu.peak_bytes and gpu.total_bytes else None
        p95 = summary.ttft_ms["p95"]
        steps.append(
            TuneStep(
                setting=setting,
                engine_args=args,
                boot_s=booted.boot_s,
                summary=summary,
                peak_gpu_memory_bytes=gpu.peak_bytes,
                gpu_memory_total_bytes=gpu.total_bytes,
                verdict=verdict(summary, share),
                within_slo=p95 is not None and p95 <= options.slo_ttft_p95_ms,
            )
        )
    candidates = [
        Candidate(
            s.setting, s.summary.output_tokens_per_s, s.summary.ttft_ms["p95"], s.verdict.word
        )
        for s in steps
    ]
    chosen = recommend(candidates, options.slo_ttft_p95_ms)
    return TuneReport(
        options=options,
        started_at=started_at,
        model=model,
        steps=steps,
        recommendation=chosen,
        recommended_args=_recommended_args(options, chosen),
        gpu_note=gpu_note,
    )


def _bench_options(options: TuneOptions, url: str, setting: Setting) -> BenchOptions:
    return BenchOptions(
        url=url,
        scenario=options.scenario,
        concurrencies=(options.concurrency or setting.max_num_seqs,),
        duration_s=options.duration_s,
        max_requests=options.max_requests,
        seed=options.seed,
        timeout_s=options.timeout_s,
        slo_ttft_p95_ms=options.slo_ttft_p95_ms,
        warmup=options.warmup,
    )


def _recommended_args(options: TuneOptions, chosen: Recommendation) -> tuple[str, ...] | None:
    """engine.args with the chosen setting, and --max-model-len from the traffic if given."""
    if chosen.setting is None:
        return None
    args = chosen.setting.engine_args(options.table.args)
    if options.traffic is not None:
        args = with_flag(args, "--max-model-len", str(options.traffic.proposed_max_model_len))
    return args
