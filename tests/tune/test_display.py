"""The live view of a tune run: a line per boot, and the bench's step line named by the setting."""

from __future__ import annotations

import io

from rich.console import Console

from llmd.bench.load import StepSpec
from llmd.bench.scenarios import scenario
from llmd.bench.stats import summarize
from llmd.tune.display import TuneLiveDisplay
from llmd.tune.settings import Setting
from llmd.tune.variants import Variant
from llmd.tune.variants_report import VariantLiveDisplay


def test_the_progress_names_each_setting() -> None:
    """Booting, ready, and the finished step's line under the setting's name."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system=None, width=120)
    spec = StepSpec(scenario("B"), 8, 1.0, 10, 0, 10.0, "tiny", 1024)
    with TuneLiveDisplay(console) as display:
        display.setting_started(0, 2, Setting(8, False))
        display.engine_ready(Setting(8, False), 31.5)
        display.step_started("target", 8, spec)
        display.step_finished(summarize("target", 8, [], 1.0, [], 0.0))
    text = buffer.getvalue()
    assert "(1/2) booting the engine with max-num-seqs 8, prefix cache off" in text
    assert "ready after 31.5 s" in text
    assert "max-num-seqs 8, prefix cache off c=8" in text


def test_a_variants_name_is_shown_as_it_is() -> None:
    """A variant named with what Rich reads as a closing tag: its boot line, the progress and
    the finished step's line show it as written (Rich used to raise MarkupError)."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system=None, width=120)
    spec = StepSpec(scenario("B"), 8, 1.0, 10, 0, 10.0, "tiny", 1024)
    with VariantLiveDisplay(console) as display:
        display.variant_started(0, 2, Variant("v[/]x [b]"))
        display.step_started("target", 8, spec)
        display.bench.progress.refresh()
        display.step_finished(summarize("target", 8, [], 1.0, [], 0.0))
    text = buffer.getvalue()
    assert "booting the engine as v[/]x [b]," in text
    assert "v[/]x [b] · concurrency 8" in text
    assert "v[/]x [b] c=8" in text
