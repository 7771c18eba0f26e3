"""The live terminal view of a tune run: a line per engine boot, then the bench's progress bar
and step line, named by the setting."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from llmd.bench.client import RequestResult
from llmd.bench.display import LiveDisplay
from llmd.bench.load import StepSpec
from llmd.bench.stats import StepSummary
from llmd.tune.settings import Setting


class TuneLiveDisplay:
    """The bench's live display, with each step named by its setting and a line per boot."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bench = LiveDisplay(console)
        self.label = ""

    def __enter__(self) -> TuneLiveDisplay:
        self.bench.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bench.__exit__(*exc)

    def setting_started(self, index: int, total: int, setting: Setting) -> None:
        self.label = setting.label
        self.bench.progress.console.print(
            f"({index + 1}/{total}) booting the engine with {setting.label} ...",
            markup=False,
            highlight=False,
        )

    def engine_ready(self, setting: Setting, boot_s: float) -> None:
        self.bench.progress.console.print(
            f"      ready after {boot_s:g} s; loading it", markup=False, highlight=False
        )

    def step_started(self, target: str, concurrency: int, spec: StepSpec) -> None:
        self.bench.step_started(self.label, concurrency, spec)

    def request_done(self, result: RequestResult) -> None:
        self.bench.request_done(result)

    def step_finished(self, summary: StepSummary) -> None:
        self.bench.step_finished(dataclasses.replace(summary, target=self.label))
