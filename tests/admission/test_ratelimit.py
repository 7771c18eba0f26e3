"""OpenAI's x-ratelimit-*-tokens headers: their names and values, the reset written as a Go
duration as OpenAI's API writes it (`6m0s`, `1s`, `12ms`)."""

from __future__ import annotations

from llmd.admission.budgets import Budget, Standing
from llmd.admission.ratelimit import go_duration, ratelimit_headers


def test_the_reset_is_a_go_duration_rounded_up() -> None:
    """Whole and fractional seconds, minutes and hours as Go's Duration.String writes them."""
    cases = {
        0.0: "0s", 0.0121: "13ms", 0.999: "999ms", 1.0: "1s", 1.5: "1.5s", 59.9996: "1m0s",
        360.0: "6m0s", 3600.0: "1h0m0s", 85656.648: "23h47m36.648s", -3.0: "0s",
    }  # fmt: skip
    assert {seconds: go_duration(seconds) for seconds in cases} == cases


def test_the_headers_describe_one_budget() -> None:
    """Limit, remaining and reset of the budget given."""
    standing = Standing(Budget.OUTPUT, limit=150000, remaining=149984, reset_s=360.0)
    assert ratelimit_headers(standing) == [
        (b"x-ratelimit-limit-tokens", b"150000"),
        (b"x-ratelimit-remaining-tokens", b"149984"),
        (b"x-ratelimit-reset-tokens", b"6m0s"),
    ]
