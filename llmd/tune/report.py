"""How a tune run is shown: the table of settings, the recommendation, the JSON file, the plot.
Renders a `TuneReport` it is given; it computes no figure of its own."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmd.bench.report import finish_plot
from llmd.tune.runner import TuneReport, TuneStep
from llmd.tune.settings import Setting

GIB = 1024**3
RELEASE_NOTE = "put these args in engine.args, or record them as a release with --release NAME"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _caching(setting: Setting) -> str:
    return "-" if setting.prefix_caching is None else ("on" if setting.prefix_caching else "off")


def step_cells(step: TuneStep, prefix: bool) -> list[str]:
    """The table cells of one step (the prefix columns when `prefix`)."""
    s = step.summary
    memory = step.peak_gpu_memory_bytes
    failures = ", ".join(f"{kind} {n}" for kind, n in s.errors_by_kind.items()) or "-"
    cells = [str(step.setting.max_num_seqs)]
    if prefix:
        cells.append(_caching(step.setting))
    cells += [
        str(s.concurrency),
        f"{_num(s.ttft_ms['p50'])} / {_num(s.ttft_ms['p95'])}",
        _num(s.e2e_ms["p50"]),
        _num(s.output_tokens_per_s),
        f"{_num(s.peak_running)} / {_num(s.peak_waiting)}",
        _pct(s.peak_kv_usage),
        "-" if memory is None else f"{memory / GIB:.1f} GiB",
    ]
    if prefix:
        cells.append(_pct(s.prefix_cache_hit_rate))
    cells += [failures, step.verdict.word, "yes" if step.within_slo else "no"]
    return cells


def _columns(prefix: bool) -> list[str]:
    columns = ["max-num-seqs", *(["prefix cache"] if prefix else []), "users"]
    columns += ["TTFT p50 / p95 ms", "e2e p50 ms", "out tok/s", "peak running / waiting"]
    columns += ["peak KV", "peak GPU mem"]
    columns += [*(["prefix hits"] if prefix else []), "errors/timeouts", "verdict", "in SLO"]
    return columns


def table(report: TuneReport) -> Table:
    """One row per setting."""
    prefix = report.options.scenario.shared_prefix_tokens > 0
    scenario = report.options.scenario
    title = f"llmd tune · scenario {scenario.name}: {scenario.title} · {report.model}"
    result = Table(title=Text(title))  # the model's path as it is, never read as markup
    for column in _columns(prefix):
        left = column in ("verdict", "errors/timeouts", "prefix cache")
        result.add_column(column, justify="left" if left else "right")
    for step in report.steps:
        result.add_row(*step_cells(step, prefix))
    return result


def summary_text(report: TuneReport) -> Text:
    """The recommendation and the engine args, the GPU note, the traffic's proposal."""
    text = Text()
    chosen = report.recommendation
    slo = report.options.slo_ttft_p95_ms
    if chosen.setting is None:
        text.append(f"no recommendation: {chosen.reason}\n", style="bold red")
    else:
        text.append(f"recommended: {chosen.setting.label} ({chosen.reason})\n", style="bold")
        args = " ".join(report.recommended_args or ())
        text.append(f"engine.args: {args}\n")
        text.append(f"{RELEASE_NOTE}\n", style="dim")
    text.append(f"TTFT p95 SLO {slo:g} ms", style="dim")
    if report.gpu_note:
        text.append(f"; GPU memory: {report.gpu_note}", style="dim")
    text.append("\n")
    traffic = report.options.traffic
    if traffic is not None:
        text.append(
            f"from {len(traffic.pairs):,} recorded requests: prompt + output p99 "
            f"{traffic.total_p99:,} tokens, so --max-model-len {traffic.proposed_max_model_len}\n"
        )
    return text


def render(report: TuneReport) -> Group:
    """Everything the terminal shows at the end of a run."""
    return Group(table(report), summary_text(report))


def write_json(report: TuneReport, path: Path, command: str | None = None) -> None:
    """The report's JSON document to `path`, with the `command` that ran it."""
    document = {"command": command, **report.to_json()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def plot(report: TuneReport, path: Path) -> None:
    """A PNG at `path`: output tokens/s and TTFT p95 against --max-num-seqs (one line per prefix
    caching variant), each point labelled with its verdict, the recommendation as a star and
    the SLO as a dashed line. Needs matplotlib (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (throughput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    variants = sorted({s.setting.prefix_caching for s in report.steps}, key=str)
    chosen = report.recommendation.setting
    for caching in variants:
        steps = [s for s in report.steps if s.setting.prefix_caching == caching]
        label = "" if caching is None else f"prefix cache {'on' if caching else 'off'}"
        xs = [s.setting.max_num_seqs for s in steps]
        rates = [s.summary.output_tokens_per_s for s in steps]
        p95s = [s.summary.ttft_ms["p95"] or float("nan") for s in steps]
        (line,) = throughput.plot(xs, rates, marker="o", label=label or None)
        ttft.plot(xs, p95s, marker="o", label=label or None)
        for x, rate, step in zip(xs, rates, steps, strict=True):
            throughput.annotate(
                step.verdict.word, (x, rate), textcoords="offset points", xytext=(0, 7),
                ha="center", fontsize=8,
            )  # fmt: skip
            if step.setting == chosen:
                throughput.plot(
                    [x], [rate], marker="*", markersize=16, linestyle="none",
                    color=line.get_color(), label="recommended",
                )  # fmt: skip
    ticks = sorted({s.setting.max_num_seqs for s in report.steps})
    scenario = report.options.scenario
    finish_plot(
        figure,
        (throughput, ttft),
        ticks,
        "--max-num-seqs",
        report.options.slo_ttft_p95_ms,
        f"llmd tune, scenario {scenario.name} ({scenario.title}), {report.model}",
        path,
    )
