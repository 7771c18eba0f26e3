"""Generated hostile requests against a live daemon on the simulator (500 examples; the
10,000-example run is scripts/fuzz_http.py): no 5xx, every error OpenAI-shaped, /health
still answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.http_fuzz import Tally, fuzz, health
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

EXAMPLES = 500


def fuzz_config(tokenizer: str = "auto") -> str:
    """etc/sim.toml at zero latency, with a CORS origin (so preflights reach that code);
    `tokenizer` "engine" counts every prompt through the engine's /tokenize."""
    return sim_config(
        ensure_tiny_model(),
        ["--zero-latency"],
        server={"cors_allowed_origins": ["http://localhost:3000"]},
        validation={"tokenizer": tokenizer},
    )


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    with LlmdProcess.running(fuzz_config(), "llmd-fuzz-") as process:
        yield process


def test_hostile_requests_never_get_a_5xx(llmd: LlmdProcess) -> None:
    """500 generated requests (wrong types, deep nesting, huge numbers, NaN, duplicate keys,
    BOM, UTF-16, control characters, lone surrogates, long strings, odd types, codings,
    methods, paths and headers): every answer is below 500, every error OpenAI-shaped, and
    /health answers throughout and after."""
    tally = Tally()
    fuzz(llmd.port, EXAMPLES, tally)
    assert tally.examples >= EXAMPLES and tally.health_checks >= EXAMPLES // 10
    assert health(llmd.port)
