"""The endpoints panel: one row per endpoint (chat, embeddings, rerank, ...) that had a request
since llmd started: its requests in flight and queued now, finished per second over the last
minute, ended since start, and how many of those were rejected or failed.
"""

from __future__ import annotations

from rich.text import Text

from llmd.tui import format as fmt
from llmd.tui.link import Snapshot
from llmd.tui.panels import Panel, grid


class EndpointPanel(Panel):
    """The snapshot's `endpoints`, in the order the daemon gives (each endpoint keeps its
    row); `errors` are the failed requests (a backend or llmd did not serve them)."""

    def show(self, s: Snapshot) -> None:
        endpoints = s.get("endpoints")
        if not self.changed(endpoints):
            return
        if not endpoints:
            said = "no request yet" if endpoints is not None else "this llmd does not report them"
            self.update(Text(said, style="dim"))
            return
        table = grid(("endpoint", "left"), ("in flight", "right"), ("queued", "right"),
                     ("req/s", "right"), ("ended", "right"), ("rejected", "right"),
                     ("errors", "right"))  # fmt: skip
        for e in endpoints:
            table.add_row(
                e["name"],
                fmt.count(e["in_flight"]),
                fmt.count(e["queued"]),
                fmt.rate(e["requests_per_s"]),
                fmt.count(e["requests"]),
                Text(fmt.count(e["rejected"]), "yellow" if e["rejected"] else ""),
                Text(fmt.count(e["errors"]), "red" if e["errors"] else ""),
            )
        self.update(table)
