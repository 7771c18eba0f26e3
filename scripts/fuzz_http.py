"""Hostile HTTP against a live llmd (issue 14): Hypothesis-generated requests to `llmd serve` on
the simulator (zero latency, a CORS origin configured), one at a time, each on its own
connection. The property: no 5xx, every error OpenAI-shaped, /health answers (checked every
10 examples and at the end). Prints the counts by status and what llmd logged.

The requests are those of tests/support/hostile_http.py (the fast suite runs 500 of them);
heavy: run it under the shared lock.

`--tokenizer engine` has llmd count every prompt through the engine's /tokenize instead of the
local tokenizer (the path taken while that loads, or when it cannot).

Usage: flock /tmp/llmd-heavy.lock .venv/bin/python scripts/fuzz_http.py [--examples 10000]
       [--seed N] [--tokenizer auto|engine] [--output FILE.json]
Exit status: 0 when the property held for every example, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.proxy.test_fuzz_http import fuzz_config  # noqa: E402
from tests.support.http_fuzz import Tally, fuzz, health  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402


def log_events(text: str) -> dict[str, int]:
    """Lines of llmd's log by event; lines that are not llmd's JSON (a library writing to
    stderr on its own) count under "(not llmd's)"."""
    events: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        try:
            events[str(json.loads(line).get("event"))] += 1
        except ValueError:
            events["(not llmd's)"] += 1
    return dict(events.most_common())


def run(examples: int, chosen_seed: int, tokenizer: str) -> dict[str, Any]:
    """Run `examples` generated requests against a fresh daemon; the summary."""
    tally = Tally()
    started = time.monotonic()
    failure = None
    with LlmdProcess.running(fuzz_config(tokenizer), "llmd-fuzz-") as llmd:
        if tokenizer == "auto":  # count locally from the first example on
            assert wait_for(lambda: "tokenizer_loaded" in llmd.log_path.read_text(), 300)
        try:
            fuzz(llmd.port, examples, tally, chosen_seed)
        except AssertionError as exc:
            failure = str(exc)
        healthy = health(llmd.port)
        events = log_events(llmd.log_path.read_text())
    return {
        "examples": tally.examples,
        "seed": chosen_seed,
        "tokenizer": tokenizer,
        "seconds": round(time.monotonic() - started, 1),
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items(), key=str)},
        "server_errors": tally.server_errors,
        "problems": len(tally.problems),
        "first_failure": failure,
        "health_checks": tally.health_checks,
        "health_after": healthy,
        "log_events": events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    parser.add_argument("--tokenizer", choices=("auto", "engine"), default="auto")
    parser.add_argument("--output", type=Path, help="write the summary here as JSON")
    args = parser.parse_args()
    chosen = args.seed if args.seed is not None else random.randrange(2**32)
    summary = run(args.examples, chosen, args.tokenizer)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    held = not summary["problems"] and summary["health_after"]
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
