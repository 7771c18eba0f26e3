"""The dashboard's panels, one widget each. Every panel's `show(snapshot)` renders the figures
the daemon sent; none computes a figure of its own.

`show` may come at any time: before the panel is composed or mounted, while it is on screen,
after it was removed; a panel never looks its own parts up in the DOM (they may not exist yet),
it holds them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.text import Text
from textual.app import ComposeResult
from textual.visual import VisualType
from textual.widget import Widget
from textual.widgets import Sparkline, Static

from llmd.admin.status_text import drained_backends
from llmd.tui import format as fmt
from llmd.tui.deploys import deploy_lines
from llmd.tui.link import Link, Snapshot
from llmd.tui.plain import PlainTable
from llmd.tui.redraw import show_text

# Engine phases and how they are shown (llmd.supervisor.state.EnginePhase).
PHASE_STYLE = {
    "serving": "bold green",
    "starting": "bold yellow",
    "restarting": "bold yellow",
    "asleep": "dim",  # an on-demand engine: it wakes when a request names its model
    "falling_asleep": "dim",
    "waking": "bold cyan",
}
SPARK_POINTS = 120  # one point per refresh: two minutes at the default 1 s
EVENT_STYLE = {"warning": "yellow", "error": "bold red", "critical": "bold red"}


class Panel(Static):
    """A panel drawn from a part of the snapshot; redrawn only when that part changed (a
    redraw of a Rich table costs more than comparing the dicts), and without laying the
    screen out again when top.tcss sets its size."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: Any = None

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        """Static's `update`, with a layout only when the panel's width or height follows its
        content (`auto`): a layout arranges the whole screen again, and under a dialog paints
        the dimmed dashboard again (llmd/tui/screens.py)."""
        width, height = self.styles.width, self.styles.height
        sized_by_content = any(size is None or size.is_auto for size in (width, height))
        super().update(content, layout=layout and sized_by_content)

    def changed(self, *parts: Any) -> bool:
        """Whether `parts` differ from what the panel last drew (and remember them)."""
        if parts == self._shown:
            return False
        self._shown = parts
        return True


def grid(*columns: tuple[str, str]) -> PlainTable:
    """A borderless table with (header, justify) columns; its `str` cells are plain text."""
    table = PlainTable(box=None, padding=(0, 1), expand=True, show_edge=False, header_style="bold")
    for header, justify in columns:
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    return table


class HeaderPanel(Static):
    """Engine state, model, uptime, release, restarts, draining, in flight (relayed to the
    engine) and queued in llmd; each deploy in progress; the cause of the engine's failure and
    its hint (the daemon's diagnosis) while it is not serving; the connection line."""

    def show(self, s: Snapshot | None, link: Link) -> None:
        line = Text()
        if s is not None:
            engine = s["engine"]
            line.append(f" llmd {s['llmd_version']} ", style="bold reverse")
            line.append(f" {s['listen']}  engine ")
            line.append(engine["state"].upper(), style=PHASE_STYLE.get(engine["state"], "bold red"))
            if engine.get("draining"):
                line.append(" DRAINED", style="bold yellow")
            line.append(f"  pid {engine['pid'] or fmt.MISSING}  model ")
            line.append(engine["model"], style="bold")
            line.append(f" ({engine['version'] or '?'})  up {fmt.duration(engine['uptime_s'])}")
            if engine.get("release"):
                line.append("  release ")
                line.append(engine["release"], style="bold")
            line.append(f"  restarts {engine['restarts']}")
            if engine["last_exit_reason"]:
                line.append(f" (last: {engine['last_exit_reason']})")
            queued = s.get("queued") or 0
            line.append(f"  in flight {s['in_flight']}" + (f" queued {queued}" if queued else ""))
            line.append("  ")
            _admitting(line, s)
            _diagnosis(line, engine)
            _guard_banner(line, s.get("guard"))
            deploy_lines(line, s.get("deploys") or [])
        line.append("\n")
        if link.connected and link.fault is not None:
            line.append(" SNAPSHOT NOT SHOWN ", style="bold reverse red")
            line.append(f" {link.fault} · retrying every {link.interval_s:g} s")
            if s is not None:
                line.append(" · showing the last snapshot shown", style="dim")
        elif link.connected:
            line.append(f" connected to {link.socket} · refresh {link.interval_s:g} s", "dim")
        else:
            since = (
                ""
                if link.lost_since is None
                else time.strftime(" since %H:%M:%S", time.localtime(link.lost_since))
            )
            label = "NOT CONNECTED" if link.fetched else "CONNECTING"
            line.append(f" {label}{since} ", style="bold reverse red")
            line.append(f" {link.error or ''} · retrying every {link.interval_s:g} s")
            if s is not None:
                line.append(" · showing the last snapshot", style="dim")
        show_text(self, line)


def _admitting(line: Text, s: Snapshot) -> None:
    """DRAINING (llmd drained), DRAINED with the names when every backend was drained by name
    (no request is served), `admitting` otherwise, then the backends drained by name."""
    drained = drained_backends(s)
    if s["draining"]:
        line.append(" DRAINING ", style="bold reverse yellow")
    elif drained and len(drained) == len(s.get("engines") or ()):
        line.append(f" DRAINED: {', '.join(drained)} ", style="bold reverse yellow")
        return
    else:
        line.append("admitting", style="green")
    if drained:
        line.append(f" · drained: {', '.join(drained)}", style="bold yellow")


def _guard_banner(line: Text, guard: dict[str, Any] | None) -> None:
    """A banner line while the SLO guard degrades service (level 1-4) or an operator has
    turned it off or pinned it: the level, its name, why, each budgeted class's TTFT p95
    against its budget (an older daemon sends no guard)."""
    if guard is None or (guard["level"] == 0 and guard["mode"] == "auto"):
        return
    line.append("\n")
    if guard["mode"] == "off":
        line.append(" SLO GUARD OFF ", style="bold reverse yellow")
    else:
        style = "bold reverse red" if guard["level"] >= 3 else "bold reverse yellow"
        line.append(f" SLO GUARD LEVEL {guard['level']} ", style=style)
        line.append(f" {guard['name']}" + (" (pinned)" if guard["mode"] == "pinned" else ""))
    line.append(f" · {guard['reason']}")
    for row in guard["classes"]:
        if row["budget_s"] is not None:
            line.append(
                f" · {row['name']} p95 {fmt.duration(row['p95_s'])}"
                f" / budget {fmt.duration(row['budget_s'])}",
                "dim",
            )


def _diagnosis(line: Text, engine: dict[str, Any]) -> None:
    """The daemon's first error finding on a failed or restarting engine (an older daemon sends
    no diagnosis)."""
    errors = [f for f in engine.get("diagnosis") or () if f["severity"] == "error"]
    if engine["state"] == "serving" or not errors:
        return
    line.append("\n")
    line.append(" DIAGNOSIS ", style="bold reverse red")
    line.append(f" {errors[0]['message']}", style="bold")
    line.append(f" · hint: {errors[0]['hint']}")


class KvCachePanel(Panel):
    """The KV-cache gauge, and running/waiting as the engine reports them."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s["kv_cache"], s["engine"], s["in_flight"]):
            return
        kv, engine = s["kv_cache"], s["engine"]
        usage = kv["usage"]
        gauge = PlainTable.grid(expand=True, padding=(0, 1))
        gauge.add_column(ratio=1)
        gauge.add_column(justify="right", width=4)
        gauge.add_row(ProgressBar(total=1.0, completed=usage or 0.0), fmt.percent(usage))
        capacity = Text(f"of {fmt.count(kv['capacity_tokens'])} tokens")
        if kv["num_blocks"] is not None:
            capacity.append(f" ({kv['num_blocks']} blocks)", style="dim")
        table = grid(("", "left"), ("", "right"))
        table.show_header = False
        table.add_row("engine running", fmt.count(engine["running"]))
        table.add_row("engine waiting", fmt.count(engine["waiting"]))
        table.add_row("llmd in flight", fmt.count(s["in_flight"]))
        age = engine["metrics_age_s"]
        table.add_row(Text("engine metrics age", "dim"), Text(fmt.duration(age), "dim"))
        self.update(Group(gauge, capacity, table))


class GpuPanel(Panel):
    """Each GPU: utilisation, memory, temperature, power; or why there is none."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s["gpus"]):
            return
        gpus = s["gpus"]
        if not gpus["devices"]:
            self.update(Text(gpus["reason"] or "no GPU reading yet", style="dim"))
            return
        table = grid(("gpu", "left"), ("util", "right"), ("mem GiB", "right"), ("°C", "right"),
                      ("W", "right"))  # fmt: skip
        table.columns[0].ratio = 1
        table.columns[0].overflow = "ellipsis"
        table.columns[2].min_width = 9
        for d in gpus["devices"]:
            memory = f"{fmt.gib(d['memory_used_bytes'])}/{fmt.gib(d['memory_total_bytes'])}"
            table.add_row(
                f"{d['index']} {d['name'].removeprefix('NVIDIA ')}",
                fmt.percent(d["utilization"]),
                memory,
                fmt.count(d["temperature_c"]),
                fmt.count(d["power_w"]),
            )
        self.update(table)


class LatencyPanel(Panel):
    """TTFT, end-to-end and queue wait: p50/p95/p99 over the last minute and five minutes."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s.get("latency")):
            return
        table = grid(("", "left"), ("", "left"), ("p50", "right"), ("p95", "right"),
                      ("p99", "right"), ("n", "right"))  # fmt: skip
        latency = s.get("latency")
        if latency is not None:
            for label, key in (("TTFT", "ttft"), ("e2e", "e2e"), ("queue", "queue_wait")):
                for window, name in (("last_1m", "1m"), ("last_5m", "5m")):
                    p = latency[window][key]
                    table.add_row(
                        Text(label, style="bold") if name == "1m" else "",
                        Text(name, style="dim"),
                        fmt.duration(p["p50"]),
                        fmt.duration(p["p95"]),
                        fmt.duration(p["p99"]),
                        fmt.count(p["count"]),
                    )
        self.update(table)


class ThroughputPanel(Widget):
    """Generated tokens/s now and as a sparkline over the snapshots fetched so far (one point
    each), with the prompt and request rates. Its three parts are made with the panel, so a
    snapshot shown before they are composed is drawn once they are."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: list[float] = []
        self.rate = Static(id="rate")
        self.spark = Sparkline([], id="spark")
        self.rates = Static(id="rates")

    def compose(self) -> ComposeResult:
        yield from (self.rate, self.spark, self.rates)

    def show(self, s: Snapshot) -> None:
        t = s.get("throughput") or {}
        generated = t.get("engine_generation_tokens_per_s")
        if generated is None:  # no engine reading yet: llmd's own count over the last minute
            generated = t.get("output_tokens_per_s")
        self.history = [*self.history[-(SPARK_POINTS - 1) :], generated or 0.0]
        self.spark.data = self.history
        rate = Text(f"{fmt.rate(generated)}", style="bold")
        rate.append(" tokens/s generated", style="")
        show_text(self.rate, rate)
        rates = Text(f"prompt {fmt.rate(t.get('engine_prompt_tokens_per_s'))} tokens/s", "dim")
        rates.append(f"\nfinished {fmt.rate(t.get('requests_per_s'))} req/s (1 min)", "dim")
        show_text(self.rates, rates)


class CountsPanel(Panel):
    """Since llmd started: requests (with how many were answered and timed out), then each way
    a request can end but answered, with its labels: rejected and aborted by code, cancelled
    by phase, errors by code. The rows add up to the requests."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s.get("counts")):
            return
        counts = s.get("counts")
        table = PlainTable.grid(expand=True, padding=(0, 1))
        table.add_column(width=9, no_wrap=True)
        table.add_column(justify="right", width=6, no_wrap=True)
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        if counts is not None:
            detail = f"answered {fmt.count(counts['answered'])}"
            if counts["timeouts"]:
                detail += f", timeouts {fmt.count(counts['timeouts'])}"
            table.add_row("requests", fmt.count(counts["requests"]), Text(detail, style="dim"))
            for name, key, style in (
                ("rejected", "rejections", "yellow"),
                ("cancelled", "cancellations", ""),
                ("aborted", "aborted", "yellow"),
                ("errors", "errors", "red"),
            ):
                by_label = counts[key]
                total = sum(by_label.values())
                table.add_row(
                    Text(name, style if total else ""), fmt.count(total), _breakdown(by_label)
                )
        self.update(table)


def _breakdown(counts: dict[str, int]) -> Text:
    return Text(", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v), style="dim")


class QueuePanel(Panel):
    """llmd's queue per class: depth and the oldest request's wait."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s["queues"]):
            return
        table = grid(("class", "left"), ("queued", "right"), ("oldest", "right"))
        for q in s["queues"]:
            table.add_row(q["name"], fmt.count(q["depth"]), fmt.duration(q["oldest_wait_s"]))
        self.update(table)


# The most a tenant's name takes of the tenants panel's width, in cells (longer: an ellipsis).
TENANT_WIDTH = 24


class TenantPanel(Panel):
    """Each tenant: in flight and queued against its limits, the KV tokens its running requests
    hold against its share, and its token budget with the least left (tokens left of its
    size; the daemon's figures, README "Tenants, classes and rejections")."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s["tenants"]):
            return
        table = grid(("tenant", "left"), ("in flight", "right"), ("queued", "right"),
                     ("kv cache", "right"), ("budget left", "right"))  # fmt: skip
        name = table.columns[0]  # a name may be 64 characters: the figures keep their room
        name.max_width, name.overflow = TENANT_WIDTH, "ellipsis"
        for t in s["tenants"]:
            budgets = t.get("budgets") or []
            tightest = min(budgets, key=lambda b: b["remaining"] / max(1, b["limit"]), default=None)
            table.add_row(
                t["name"],
                fmt.of(fmt.count(t["in_flight"]), fmt.limit(t["max_in_flight"])),
                fmt.of(fmt.count(t["queued"]), fmt.limit(t["max_queued"])),
                _share(t.get("kv_tokens"), t.get("max_kv_tokens")),
                fmt.MISSING
                if tightest is None
                else fmt.of(fmt.tokens(tightest["remaining"]), fmt.tokens(tightest["limit"])),
            )
        if not s["tenants"]:
            table.add_row(Text("no tenant has work in flight", style="dim"))
        self.update(table)


def _share(held: int | None, share: int | None) -> str:
    """KV tokens held, against the tenant's share when it has one."""
    if share is None:
        return fmt.tokens(held)
    return fmt.of(fmt.tokens(held), fmt.tokens(share))


class EventsPanel(Panel):
    """The daemon's recent notable events, newest first, at local clock time (as journald)."""

    def show(self, s: Snapshot) -> None:
        if not self.changed(s.get("events")):
            return
        self.update(_events(s.get("events")))


def _events(events: Iterable[dict[str, Any]] | None) -> RenderableType:
    if events is None:
        return Text("this llmd does not report events (older than llmd-top)", style="dim")
    table = PlainTable.grid(expand=True, padding=(0, 1))
    table.add_column(width=8, no_wrap=True)  # local time
    table.add_column(width=7, no_wrap=True)  # level
    table.add_column(width=22, no_wrap=True, overflow="ellipsis")  # event
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")  # message
    for e in reversed(list(events)):
        style = EVENT_STYLE.get(e["level"], "")
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(e["at"])),
            Text(e["level"], style=style),
            Text(e["event"], style=style or "bold"),
            e["message"],
        )
    return table
