"""The live terminal view of a run: a progress bar per step and each step's row as it ends."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from llmd.bench.client import RequestResult
from llmd.bench.load import StepSpec
from llmd.bench.report import scenario_lines
from llmd.bench.stats import StepSummary


class LiveDisplay:
    """Implements `runner.Display` with rich, on `console` (the CLI passes stderr's)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}", markup=False),  # a target is a name, not markup
            BarColumn(),
            TextColumn("{task.fields[done]} done · {task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._started = 0.0
        self._duration = 0.0
        self._done = 0
        self._failed = 0

    def __enter__(self) -> LiveDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def step_started(self, target: str, concurrency: int, spec: StepSpec) -> None:
        if self._task is not None:
            self.progress.remove_task(self._task)
        self._started, self._duration = time.monotonic(), spec.duration_s
        self._done = self._failed = 0
        self._task = self.progress.add_task(
            f"{target} · concurrency {concurrency}", total=spec.duration_s, done=0, failed=0
        )

    def request_done(self, result: RequestResult) -> None:
        self._done += 1
        self._failed += result.outcome in ("error", "timeout")
        if self._task is not None:
            elapsed = min(time.monotonic() - self._started, self._duration)
            self.progress.update(
                self._task, completed=elapsed, done=self._done, failed=self._failed
            )

    def step_finished(self, summary: StepSummary) -> None:
        if self._task is not None:
            self.progress.update(self._task, completed=self._duration)
        ttft = summary.ttft_ms["p95"]
        self.progress.console.print(
            f"{summary.target:>6} c={summary.concurrency:<4} {summary.ok} ok, "
            f"{summary.errors + summary.timeouts} failed, "
            f"{summary.output_tokens_per_s:,.0f} tok/s, TTFT p95 "
            f"{'-' if ttft is None else f'{ttft:,.0f}'} ms, {summary.verdict}",
            markup=False,
            highlight=False,
        )
        for line in scenario_lines(summary.target, summary):
            self.progress.console.print(f"       {line}", markup=False, highlight=False)
