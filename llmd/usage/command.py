"""`llmd usage`: the usage kept in the state directory, per tenant and model, and the token
budgets as last saved, read without a daemon (llmd/usage/store.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from llmd.arguments import duration
from llmd.config import config_path, load_config
from llmd.errors import ConfigError, UsageError
from llmd.usage.records import HOUR_S
from llmd.usage.store import FILE_NAME, UsageStore, UsageTotal

EXIT_FAILED = 1
EXIT_CONFIG = 78  # sysexits.h EX_CONFIG, as `llmd check-config`
OUTCOMES = ("ok", "rejected", "cancelled", "aborted", "error")


def add_parser(verbs: Any) -> None:
    """Register `llmd usage` on the `llmd` parser's subcommands."""
    usage = verbs.add_parser(
        "usage",
        help="tokens, requests and outcomes per tenant and model, and budgets left (no daemon "
        "needed)",
        description=__doc__,
    )
    usage.add_argument("--tenant", help="this tenant only")
    usage.add_argument(
        "--since",
        type=duration,
        default=86_400.0,
        metavar="DURATION",
        help="from this long ago (90s, 30m, 24h, 7d; from the start of that hour; default 24h)",
    )
    usage.add_argument("--json", action="store_true", help="print it as JSON")
    usage.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
    usage.add_argument("--state-dir", help="the state directory (default: server.state_dir)")
    usage.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the usage since `args.since` seconds ago; the exit status."""
    try:
        state_dir = Path(args.state_dir or load_config(config_path(args.config)).server.state_dir)
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    now = time.time()
    since = int(now - args.since) // HOUR_S * HOUR_S
    path = state_dir / FILE_NAME
    totals: list[UsageTotal] = []
    budgets: list[dict[str, Any]] = []
    if path.exists():
        try:
            store = UsageStore(path)
            totals = store.totals(since, args.tenant)
            budgets = [
                {
                    "tenant": b.tenant,
                    "budget": b.budget,
                    "limit": int(b.capacity),
                    "remaining": max(0, int(b.level_at(now))),
                    "reset_s": round((b.capacity - b.level_at(now)) / b.rate, 1) if b.rate else 0,
                }
                for b in store.budgets()
                if args.tenant is None or b.tenant == args.tenant
            ]
            store.close()
        except UsageError as exc:
            print(f"llmd: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        usage = [dataclasses.asdict(total) for total in totals]
        print(json.dumps({"since": since, "usage": usage, "budgets": budgets}, indent=2))
        return 0
    print(_table(totals, since, path))
    if budgets:
        print("\n" + _budgets(budgets))
    return 0


def _table(totals: list[UsageTotal], since: int, path: Path) -> str:
    """The usage as a table, with where it comes from and since when."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(since))
    lines = [f"usage since {when} ({path})"]
    if not totals:
        return lines[0] + "\nnone kept"
    head = ["tenant", "model", "requests", *OUTCOMES, "tokens in", "tokens out"]
    rows = [
        [t.tenant, t.model or "-", f"{t.requests:,}"]
        + [f"{t.outcomes.get(outcome, 0):,}" for outcome in OUTCOMES]
        + [f"{t.input_tokens:,}", f"{t.output_tokens:,}"]
        for t in totals
    ]
    return "\n".join([lines[0], *_columns([head, *rows], left=2)])


def _budgets(budgets: list[dict[str, Any]]) -> str:
    """The budgets as last saved, refilled to now."""
    head = ["tenant", "budget", "left", "size", "full in"]
    rows = [
        [b["tenant"], b["budget"], f"{b['remaining']:,}", f"{b['limit']:,}", f"{b['reset_s']:g} s"]
        for b in budgets
    ]
    return "\n".join(
        ["budgets (as last saved by llmd, refilled since)", *_columns([head, *rows], left=2)]
    )


def _columns(rows: list[list[str]], left: int) -> list[str]:
    """`rows` in aligned columns: the first `left` to the left, the others to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
