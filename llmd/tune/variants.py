"""`llmd tune --variants FILE`: several engine-argument sets (a KV cache dtype, a quantized
checkpoint, ...) compared on the same traffic: throughput, TTFT, and how far each variant's
greedy answers to the release's golden prompts drift from the first variant's (token
agreement), so "compare the quality of the quantized version" is a number.

    # variants.toml: the first is the reference
    [[variants]]
    name = "bf16"
    [[variants]]
    name = "kv-fp8"
    args = ["--kv-cache-dtype", "fp8"]      # set over engine.args, flag by flag
    [[variants]]
    name = "awq"
    model = "/models/my-model-awq"          # another checkpoint of the same model
    args = ["--quantization", "awq"]
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llmd.bench.runner import BenchOptions, run_bench
from llmd.bench.scenarios import Scenario
from llmd.bench.stats import StepSummary
from llmd.config import Config, EngineConfig
from llmd.engine.args import engine_auth_headers, flag_name, parse_flags, without_flag
from llmd.errors import TuneError
from llmd.releases.golden import GoldenPrompt
from llmd.releases.smoke import GoldenAnswer
from llmd.releases.smoke_runner import golden_answers
from llmd.tune.engine import booted_engine
from llmd.tune.runner import load_figures


@dataclasses.dataclass(frozen=True)
class Variant:
    """One engine-argument set: `args` set over engine.args flag by flag (a flag given here
    replaces the same flag there, and `--X` and `--no-X` replace each other), `model` another
    checkpoint ("" keeps engine.model; the served name stays, so clients see one model)."""

    name: str
    args: tuple[str, ...] = ()
    model: str = ""

    def engine(self, table: EngineConfig) -> EngineConfig:
        """`table` with this variant's model and args."""
        args = tuple(table.args)
        for name, value in parse_flags(list(self.args)):
            bare = flag_name(name).removeprefix("--no-").removeprefix("--")
            for spelling in (f"--{bare}", f"--no-{bare}"):
                args = without_flag(args, spelling, takes_value=value is not None)
        served = table.served_model_name or table.model
        model = self.model or table.model
        return dataclasses.replace(
            table, args=(*args, *self.args), model=model, served_model_name=served
        )


def load_variants(path: Path) -> tuple[Variant, ...]:
    """The variants of TOML file `path` (`[[variants]]` tables: `name`, optional `args` and
    `model`), two at least, names distinct. Raises TuneError naming the file and the table."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TuneError(f"--variants {path}: {exc}") from None
    tables = raw.get("variants")
    if not isinstance(tables, list) or len(tables) < 2:
        raise TuneError(f"--variants {path}: expected two [[variants]] tables or more")
    found = []
    for number, table in enumerate(tables, 1):
        args, model = table.get("args", []), table.get("model", "")
        name = table.get("name")
        unknown = set(table) - {"name", "args", "model"}
        if (
            not isinstance(name, str)
            or not name
            or not isinstance(args, list)
            or not all(isinstance(a, str) for a in args)
            or not isinstance(model, str)
            or unknown
        ):
            extra = f" (unknown: {', '.join(sorted(unknown))})" if unknown else ""
            raise TuneError(
                f"--variants {path}: variant {number}: expected name = '...', optional "
                f"args = ['--flag', ...] and model = 'PATH'{extra}"
            )
        found.append(Variant(name, tuple(args), model))
    names = [variant.name for variant in found]
    if len(set(names)) != len(names):
        raise TuneError(f"--variants {path}: variant names repeat ({', '.join(names)})")
    return tuple(found)


def token_agreement(reference: Sequence[int], other: Sequence[int]) -> float:
    """The share of token positions (over the longer answer) where `other` has the same token
    as `reference`: 1.0 for the same answer, 0.0 when they differ from the first token."""
    longest = max(len(reference), len(other))
    if longest == 0:
        return 1.0
    return sum(a == b for a, b in zip(reference, other, strict=False)) / longest


@dataclasses.dataclass(frozen=True)
class VariantOptions:
    """Everything a variants run needs; the load is `concurrency` users of `scenario` for
    `duration_s` per variant; golden prompts answered greedy, up to `golden_max_tokens`."""

    config: Config
    engine: str
    variants: tuple[Variant, ...]
    scenario: Scenario
    slo_ttft_p95_ms: float
    golden: tuple[GoldenPrompt, ...]
    golden_max_tokens: int = 16
    concurrency: int = 8
    duration_s: float = 30.0
    max_requests: int = 10_000
    timeout_s: float = 120.0
    seed: int = 0
    warmup: int = 2


@dataclasses.dataclass(frozen=True)
class VariantStep:
    """One variant's figures: its engine args and model, boot time (s), the bench step, its
    golden answers, and each answer's token agreement with the first variant's (None for a
    failed answer on either side)."""

    variant: Variant
    engine_args: tuple[str, ...]
    model: str
    boot_s: float
    summary: StepSummary
    golden: tuple[GoldenAnswer, ...]
    agreement: tuple[float | None, ...]

    @property
    def mean_agreement(self) -> float | None:
        known = [a for a in self.agreement if a is not None]
        return round(sum(known) / len(known), 4) if known else None

    @property
    def identical(self) -> int:
        """Golden answers token for token the first variant's."""
        return sum(a == 1.0 for a in self.agreement)

    def to_json(self) -> dict[str, Any]:
        s = self.summary
        return {
            "variant": dataclasses.asdict(self.variant),
            "engine_args": list(self.engine_args),
            "model": self.model,
            "boot_s": self.boot_s,
            **load_figures(s),
            "golden": [
                {**dataclasses.asdict(answer), "token_agreement": agreement}
                for answer, agreement in zip(self.golden, self.agreement, strict=True)
            ],
            "mean_token_agreement": self.mean_agreement,
            "identical_answers": self.identical,
            "bench": dataclasses.asdict(s),
        }


@dataclasses.dataclass
class VariantReport:
    """A finished variants run: each variant's step, in the file's order."""

    options: VariantOptions
    started_at: float
    steps: list[VariantStep]


async def run_variants(options: VariantOptions, display: Any = None) -> VariantReport:
    """Boot the engine with each variant in turn, ask its golden prompts, run the load, stop
    it. Raises TuneError when one does not boot, BenchError when its load cannot run."""
    started_at = time.time()
    table = options.config.engine_tables[options.engine]
    steps: list[VariantStep] = []
    reference: tuple[GoldenAnswer, ...] = ()
    for index, variant in enumerate(options.variants):
        if display is not None:
            display.variant_started(index, len(options.variants), variant)
        engine = variant.engine(table)
        with tempfile.TemporaryDirectory(prefix="llmd-tune-", dir="/tmp") as runtime_dir:
            async with booted_engine(engine, Path(runtime_dir)) as booted:
                answers = await golden_answers(
                    booted.socket,
                    engine.model_name,
                    options.golden,
                    max_tokens=options.golden_max_tokens,
                    timeout_s=options.timeout_s,
                    headers=engine_auth_headers(engine),
                )
                result = await run_bench(_bench(options, f"unix:{booted.socket}"), display)
        reference = reference or answers
        steps.append(
            VariantStep(
                variant=variant,
                engine_args=engine.args,
                model=engine.model,
                boot_s=booted.boot_s,
                summary=result.steps["target"][0],
                golden=answers,
                agreement=tuple(
                    None
                    if a.error or r.error
                    else round(token_agreement(r.token_ids, a.token_ids), 4)
                    for r, a in zip(reference, answers, strict=True)
                ),
            )
        )
    return VariantReport(options, started_at, steps)


def _bench(options: VariantOptions, url: str) -> BenchOptions:
    return BenchOptions(
        url=url,
        scenario=options.scenario,
        concurrencies=(options.concurrency,),
        duration_s=options.duration_s,
        max_requests=options.max_requests,
        seed=options.seed,
        timeout_s=options.timeout_s,
        slo_ttft_p95_ms=options.slo_ttft_p95_ms,
        warmup=options.warmup,
    )
