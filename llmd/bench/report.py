"""How a finished run is shown: the sweep table, the operating points, the JSON file, the plots.

Renders a `BenchReport` it is given; it computes no figure of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmd.bench.runner import BenchReport
from llmd.bench.stats import StepSummary


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def step_row(step: StepSummary) -> list[str]:
    """The table cells of one step, in `COLUMNS` order."""
    failures = ", ".join(f"{kind} {n}" for kind, n in step.errors_by_kind.items()) or "-"
    return [
        step.target,
        str(step.concurrency),
        str(step.ok),
        str(step.disconnected) if step.disconnected else "-",
        failures,
        " / ".join(_num(step.ttft_ms[p]) for p in ("p50", "p95", "p99")),
        " / ".join(_num(step.e2e_ms[p]) for p in ("p50", "p95", "p99")),
        _num(step.output_tokens_per_s),
        _num(step.requests_per_s, 2),
        _pct(step.peak_kv_usage),
        _num(step.peak_waiting),
        _pct(step.client_cpu_share),
        step.verdict,
    ]


COLUMNS = (
    "target",
    "conc",
    "ok",
    "disc",
    "errors/timeouts",
    "TTFT p50/p95/p99 ms",
    "e2e p50/p95/p99 ms",
    "out tok/s",
    "req/s",
    "peak KV",
    "peak wait",
    "client CPU",
    "verdict",
)


def sweep_table(report: BenchReport) -> Table:
    """The sweep, one row per (concurrency, target)."""
    scenario = report.options.scenario
    title = f"llmd bench · scenario {scenario.name}: {scenario.title} · {report.model}"
    table = Table(title=Text(title))  # the model's name as it is, never read as markup
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("target", "verdict") else "right")
    rows = sorted(
        (s for steps in report.steps.values() for s in steps),
        key=lambda s: (s.concurrency, s.target != "direct"),
    )
    queued = any(s.peak_llmd_queue is not None for s in rows)
    if queued:  # llmd's own queue, when its /metrics has one (admission)
        table.add_column("peak llmd queue", justify="right")
    prefix = report.options.scenario.shared_prefix_tokens > 0
    if prefix:  # the engine's prefix cache, in the shared-prefix scenario
        table.add_column("prefix hits", justify="right")
    indexing = any(s.indexing is not None for s in rows)
    if indexing:  # H: the chat's TTFT before and during the embeddings, and theirs
        for column in INDEXING_COLUMNS:
            table.add_column(column, justify="right")
    for step in rows:
        cells = step_row(step)
        if queued:
            cells.append(_num(step.peak_llmd_queue))
        if prefix:
            cells.append(_pct(step.prefix_cache_hit_rate))
        if indexing:
            cells += indexing_cells(step)
        table.add_row(*cells)
    return table


INDEXING_COLUMNS = ("TTFT p95 before/during ms", "embed req/s", "docs/s", "embed errors")


def indexing_cells(step: StepSummary) -> list[str]:
    """H's cells of one step, in `INDEXING_COLUMNS` order (dashes for a step without)."""
    figures = step.indexing
    if figures is None:
        return ["-"] * len(INDEXING_COLUMNS)
    failures = ", ".join(f"{kind} {n}" for kind, n in figures.errors_by_kind.items()) or "-"
    before, during = figures.chat_ttft_before_ms["p95"], figures.chat_ttft_during_ms["p95"]
    return [
        f"{_num(before)} / {_num(during)}",
        _num(figures.requests_per_s, 2),
        _num(figures.documents_per_s, 1),
        failures,
    ]


def ratio_table(report: BenchReport) -> Table | None:
    """llmd / direct per concurrency, or None without a direct target."""
    if not report.ratios:
        return None
    table = Table(title="through llmd / direct")
    names: tuple[str, ...] = (
        "concurrency", "output_tokens_per_s", "ttft_p50", "ttft_p95", "e2e_p50", "e2e_p95",
    )  # fmt: skip
    if "ttft_p95_indexing" in report.ratios[0]:  # H
        names += ("ttft_p95_indexing", "embed_requests_per_s")
    for name in names:
        table.add_column(name.replace("_", " "), justify="right")
    for row in report.ratios:
        table.add_row(*(_num(row[n], 0 if n == "concurrency" else 2) for n in names))
    return table


def summary_lines(report: BenchReport) -> Text:
    """The operating point of each target, and the client warning if any."""
    text = Text()
    for label, point in report.operating_points.items():
        if point.concurrency is None:
            text.append(f"operating point ({label}): none: {point.reason}\n", style="bold red")
        else:
            text.append(
                f"operating point ({label}): concurrency {point.concurrency}, "
                f"{_num(point.output_tokens_per_s)} output tok/s, "
                f"{_num(point.requests_per_s, 2)} req/s, TTFT p95 {_num(point.ttft_p95_ms)} ms "
                f"(SLO {point.slo_ttft_p95_ms:g} ms; {point.reason})\n",
                style="bold",
            )
    for label, steps in report.steps.items():
        for step in steps:
            for line in scenario_lines(label, step):
                text.append(line + "\n")
    if report.client_warning:
        text.append(f"warning: {report.client_warning}\n", style="yellow")
    return text


def scenario_lines(label: str, step: StepSummary) -> list[str]:
    """The sentences of a step's scenario-specific figures (H, I, J), if any."""
    lines = []
    if step.indexing is not None:
        lines.append(indexing_line(label, step))
    if step.hangup is not None:
        lines.append(hangup_line(label, step))
    if step.quota is not None:
        lines.append(quota_line(label, step))
    return lines


def hangup_line(label: str, step: StepSummary) -> str:
    """I in a sentence: how many hung up, how fast the engine stopped their sequences, and the
    stayers' TTFT and inter-token p95 after against before."""
    h = step.hangup
    assert h is not None
    stop = "not seen" if h.engine_stop_s is None else f"{h.engine_stop_s * 1000:.0f} ms"
    return (
        f"hang-up ({label}, concurrency {step.concurrency}): {h.leavers} users left at "
        f"{_num(h.at_s, 1)} s ({h.cut} streams cut); the engine's running sequences fell from "
        f"{_num(h.running_before)} to the {h.stayers} stayers' in {stop}; stayers' TTFT p95 "
        f"{_num(h.stayers_ttft_before_ms['p95'])} -> {_num(h.stayers_ttft_after_ms['p95'])} ms, "
        f"inter-token p95 {_num(h.stayers_itl_before_ms['p95'], 1)} -> "
        f"{_num(h.stayers_itl_after_ms['p95'], 1)} ms, {h.stayers_errors} stayers failed"
    )


def quota_line(label: str, step: StepSummary) -> str:
    """J in a sentence: the pusher's 429s and Retry-After, and the others' TTFT p95 during
    against before."""
    q = step.quota
    assert q is not None
    retry = q.retry_after_s
    ratio = q.ttft_p95_during_over_before
    return (
        f"over quota ({label}, concurrency {step.concurrency}): the pusher sent {q.requests}, "
        f"{q.ok} answered ({_num(q.ok_per_s, 2)}/s), {q.rejected_429} got 429 with Retry-After "
        f"{_num(retry['min'], 1)}-{_num(retry['max'], 1)} s (honoured "
        f"{_num(None if q.honoured is None else q.honoured * 100)}%, refused again after "
        f"waiting {_num(None if q.refused_again is None else q.refused_again * 100)}%); the "
        f"others' TTFT p95 {_num(q.others_ttft_during_ms['p95'])} ms while it pushed, "
        f"{_num(q.others_ttft_before_ms['p95'])} ms before"
        + (f" (x{ratio:.2f})" if ratio is not None else "")
    )


def indexing_line(label: str, step: StepSummary) -> str:
    """H in a sentence for one step: the chat's TTFT p95 during the embeddings against before,
    and the embeddings' rate."""
    figures = step.indexing
    assert figures is not None
    ratio = figures.ttft_p95_during_over_before
    return (
        f"indexing ({label}, concurrency {step.concurrency}): chat TTFT p95 "
        f"{_num(figures.chat_ttft_during_ms['p95'])} ms during the embeddings, "
        f"{_num(figures.chat_ttft_before_ms['p95'])} ms before"
        + (f" (x{ratio:.2f})" if ratio is not None else "")
        + f"; {_num(figures.requests_per_s, 2)} embeddings req/s, "
        f"{_num(figures.documents_per_s, 1)} documents/s, {figures.errors} failed"
    )


def render(report: BenchReport) -> Group:
    """Everything the terminal shows at the end of a run."""
    parts: list[Table | Text] = [sweep_table(report)]
    ratio = ratio_table(report)
    if ratio is not None:
        parts.append(ratio)
    parts.append(summary_lines(report))
    return Group(*parts)


def write_json(report: BenchReport, path: Path, command: str | None = None) -> None:
    """The report's JSON document to `path` (indented, UTF-8), with the `command` that ran it."""
    document = {"command": command, **report.to_json()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def plot(report: BenchReport, path: Path) -> None:
    """A PNG at `path`: output tokens/s and TTFT p95 against concurrency, one line per target,
    each operating point as a star, the SLO as a dashed line. Needs matplotlib (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (throughput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, steps in report.steps.items():
        xs = [s.concurrency for s in steps]
        (line,) = throughput.plot(
            xs, [s.output_tokens_per_s for s in steps], marker="o", label=label
        )
        ttft.plot(
            xs,
            [s.ttft_ms["p95"] if s.ttft_ms["p95"] is not None else float("nan") for s in steps],
            marker="o",
            label=label,
        )
        point = report.operating_points[label]
        if point.concurrency is not None and point.output_tokens_per_s is not None:
            throughput.plot(
                [point.concurrency],
                [point.output_tokens_per_s],
                marker="*",
                markersize=16,
                linestyle="none",
                color=line.get_color(),
                label=f"operating point ({label})",
            )
    ticks = sorted({s.concurrency for steps in report.steps.values() for s in steps})
    scenario = report.options.scenario
    finish_plot(
        figure,
        (throughput, ttft),
        ticks,
        "concurrency",
        report.options.slo_ttft_p95_ms,
        f"llmd bench, scenario {scenario.name} ({scenario.title}), {report.model}",
        path,
    )


def finish_plot(
    figure: Any,
    axes: tuple[Any, Any],
    ticks: list[int],
    xlabel: str,
    slo_ms: float,
    title: str,
    path: Path,
) -> None:
    """Style a tokens/s and a TTFT p95 panel (log2 x axis at `ticks`, the SLO as a dashed line),
    title the figure and save it as a PNG at `path` (used by `llmd bench` and `llmd tune`)."""
    import matplotlib.pyplot as plt

    throughput, ttft = axes
    ttft.axhline(slo_ms, linestyle="--", color="grey", label=f"SLO {slo_ms:g} ms")
    for axis, ylabel in ((throughput, "output tokens/s"), (ttft, "TTFT p95 (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.minorticks_off()
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
