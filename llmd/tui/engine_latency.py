"""The engine-side panel: per backend, the engine's own view of its last minute: mean prefill
and decode time and how its time splits between the two, mean inter-token latency,
preemptions per second and the prefix cache's hit ratio (the snapshot's `engines[].latency`).
Means, not p95: vLLM's request-time buckets start at 0.3 s, so a quantile under that is a
guess within the first bucket (`llmd status` gives both).
"""

from __future__ import annotations

from rich.text import Text

from llmd.tui import format as fmt
from llmd.tui.link import Snapshot
from llmd.tui.panels import Panel, grid


class EngineLatencyPanel(Panel):
    """A row per backend that reports the engine's side of latency; a preemption rate above
    zero shows in yellow (the KV cache is full and sequences are recomputed)."""

    def show(self, s: Snapshot) -> None:
        engines = [e for e in s.get("engines") or [] if e.get("latency")]
        if not self.changed(engines):
            return
        if not engines:
            self.update(Text("no engine figures yet", style="dim"))
            return
        # prefill share of prefill + decode time; preemptions per second; prefix-cache hits
        table = grid(("engine", "left"), ("prefill", "right"), ("decode", "right"),
                     ("pf%", "right"), ("ITL", "right"), ("pre/s", "right"),
                     ("hit%", "right"))  # fmt: skip
        table.columns[0].overflow = "ellipsis"
        for e in engines:
            latency = e["latency"]
            share = latency["prefill_share"]
            preempting = latency["preemptions_per_s"]
            table.add_row(
                e["name"],
                fmt.duration(latency["prefill"]["mean_s"]),
                fmt.duration(latency["decode"]["mean_s"]),
                fmt.percent(share),
                fmt.duration(latency["inter_token"]["mean_s"]),
                Text(fmt.rate(preempting), "yellow" if preempting else ""),
                fmt.percent(latency["prefix_cache_hit_ratio"]),
            )
        self.update(table)
