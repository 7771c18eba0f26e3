"""The engine-side panel: per backend, the engine's own view of its last minute: mean queue,
prefill and decode time and how its time splits between the last two, mean inter-token
latency, preemptions per second (and since it started) and the prefix cache's hit ratio (and
since start), from the snapshot's `engines[].latency`.
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
        table = grid(("engine", "left"), ("queue", "right"), ("prefill", "right"),
                     ("decode", "right"), ("prefill share", "right"), ("inter-token", "right"),
                     ("preemptions/s", "right"), ("since start", "right"),
                     ("prefix-cache hits", "right"), ("since start", "right"))  # fmt: skip
        for e in engines:
            latency = e["latency"]
            preempting = latency["preemptions_per_s"]
            table.add_row(
                e["name"],
                fmt.duration(latency["queue"]["mean_s"]),
                fmt.duration(latency["prefill"]["mean_s"]),
                fmt.duration(latency["decode"]["mean_s"]),
                fmt.percent(latency["prefill_share"]),
                fmt.duration(latency["inter_token"]["mean_s"]),
                Text(fmt.rate(preempting), "yellow" if preempting else ""),
                fmt.count(latency["preemptions"]),
                fmt.percent(latency["prefix_cache_hit_ratio"]),
                fmt.percent(latency["prefix_cache_hit_ratio_total"]),
            )
        self.update(table)
