"""The headers that tell a client where it stands in its token budget, as OpenAI's API sends
them (platform.openai.com/docs/guides/rate-limits, "Rate limits in headers"), so SDKs and
agents that read them back off by themselves. Pure.

    x-ratelimit-limit-tokens       150000   the tokens permitted before the limit is exhausted
    x-ratelimit-remaining-tokens   149984   the tokens left now
    x-ratelimit-reset-tokens       6m0s     the time until the limit resets to its initial state

OpenAI writes the reset as a Go duration (`1s`, `6m0s`, `23h47m36.648s`, `12ms`) and, where
several token limits apply (per minute, per day), describes the one nearest exhaustion; llmd
does the same over a tenant's budgets (`Budgets.tightest`).
"""

from __future__ import annotations

import math

from llmd.admission.budgets import Standing

LIMIT_HEADER = b"x-ratelimit-limit-tokens"
REMAINING_HEADER = b"x-ratelimit-remaining-tokens"
RESET_HEADER = b"x-ratelimit-reset-tokens"


def ratelimit_headers(standing: Standing) -> list[tuple[bytes, bytes]]:
    """The three `x-ratelimit-*-tokens` headers for a budget that stands at `standing`."""
    return [
        (LIMIT_HEADER, str(standing.limit).encode()),
        (REMAINING_HEADER, str(standing.remaining).encode()),
        (RESET_HEADER, go_duration(standing.reset_s).encode()),
    ]


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String` writes it, to the millisecond: `0s`, `12ms`,
    `1s`, `1.5s`, `6m0s`, `1h0m0s`, `23h47m36.648s` (rounded up: a client that waits this long
    finds the tokens there)."""
    ms = math.ceil(max(0.0, seconds) * 1000 - 1e-6)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    text = f"{whole}.{fraction:03d}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return text
