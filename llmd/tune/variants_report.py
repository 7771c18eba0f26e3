"""How a `llmd tune --variants` run is shown: a row per variant (its load's figures against
the first variant's, and its golden answers' token agreement with the first's), the JSON file.
Renders a `VariantReport` it is given; the live view names each step by its variant."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmd import __version__
from llmd.tune.display import TuneLiveDisplay
from llmd.tune.variants import Variant, VariantReport


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(report: VariantReport) -> Table:
    """One row per variant, the first the reference; with a shared prefix (scenario G) the
    engine's prefix-cache hit rate during its load too."""
    scenario = report.options.scenario
    prefix = scenario.shared_prefix_tokens > 0
    result = Table(title=f"llmd tune --variants · scenario {scenario.name}: {scenario.title}")
    columns = [
        *("variant", "args", "boot s", "TTFT p50 / p95 ms", "e2e p50 ms", "out tok/s"),
        *("x first", *(["prefix hits"] if prefix else []), "errors"),
        *("golden token agreement", "identical"),
    ]
    for column in columns:
        result.add_column(column, justify="left" if column in ("variant", "args") else "right")
    first = report.steps[0].summary.output_tokens_per_s if report.steps else None
    for step in report.steps:
        s = step.summary
        args = " ".join(step.variant.args) or "(engine.args)"
        if step.variant.model:
            args += f" model {step.variant.model}"
        agreement = step.mean_agreement
        result.add_row(
            Text(step.variant.name),  # the user's words, never read as Rich markup
            Text(args),
            _num(step.boot_s, 1),
            f"{_num(s.ttft_ms['p50'])} / {_num(s.ttft_ms['p95'])}",
            _num(s.e2e_ms["p50"]),
            _num(s.output_tokens_per_s),
            _num(s.output_tokens_per_s / first, 2) if first else "-",
            *([_pct(s.prefix_cache_hit_rate)] if prefix else []),
            str(s.errors + s.timeouts),
            "-" if agreement is None else f"{agreement:.1%}",
            f"{step.identical}/{len(step.golden)}",
        )
    return result


def render(report: VariantReport) -> Group:
    """Everything the terminal shows at the end of a run."""
    note = Text(
        f"{report.steps[0].variant.name if report.steps else '-'} is the reference: golden "
        "answers are greedy (temperature 0); token agreement is the share of token positions "
        "(over the longer answer) where a variant's answer has the reference's token.\n",
        style="dim",
    )
    return Group(table(report), note)


def to_json(report: VariantReport) -> dict[str, Any]:
    """The JSON document `--output` writes."""
    options = report.options
    table_ = options.config.engine_tables[options.engine]
    return {
        "llmd_version": __version__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(report.started_at)),
        "config": options.config.source,
        "engine": {"name": options.engine, "kind": table_.kind, "args": list(table_.args)},
        "scenario": {
            "name": options.scenario.name,
            "title": options.scenario.title,
            "lengths": options.scenario.mix.describe(),
        },
        "options": {
            "concurrency": options.concurrency,
            "duration_s": options.duration_s,
            "max_requests": options.max_requests,
            "timeout_s": options.timeout_s,
            "seed": options.seed,
            "golden_prompts": [prompt.label for prompt in options.golden],
            "golden_max_tokens": options.golden_max_tokens,
        },
        "reference": report.steps[0].variant.name if report.steps else None,
        "variants": [step.to_json() for step in report.steps],
    }


def write_json(report: VariantReport, path: Path, command: str | None = None) -> None:
    """The report's JSON document to `path`, with the `command` that ran it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, **to_json(report)}, indent=2) + "\n")


class VariantLiveDisplay(TuneLiveDisplay):
    """The tune's live display, with a line per variant's boot and each step named by it."""

    def variant_started(self, index: int, total: int, variant: Variant) -> None:
        self.label = variant.name
        self.bench.progress.console.print(
            f"({index + 1}/{total}) booting the engine as {variant.name}, then its golden "
            "prompts and the load ...",
            markup=False,
            highlight=False,
        )
