"""The `[release]` table: built with the config's strict checks, each bad value named."""

from __future__ import annotations

import pytest

from llmd.errors import ConfigError
from llmd.releases.settings import ReleaseConfig, parse_steps, release_config


def test_an_empty_table_gives_the_documented_defaults() -> None:
    """Every key has a default; steps and buckets parse."""
    config = release_config({})
    assert config == ReleaseConfig()
    assert config.steps() == (5, 25, 50, 100) and config.buckets() == (512, 2048, 8192)


def test_keys_and_types_are_checked_as_in_the_rest_of_the_config() -> None:
    """Unknown keys and wrong types fail naming `release.KEY`."""
    with pytest.raises(ConfigError, match=r"unknown key release\.step"):
        release_config({"step": 10})
    with pytest.raises(ConfigError, match=r"release\.min_requests = 'x'"):
        release_config({"min_requests": "x"})
    assert release_config({"step_s": 60, "max_step_s": 600}).step_s == 60.0


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"canary_steps": "5,25,50"}, "canary_steps"),
        ({"canary_steps": "100"}, "canary_steps"),
        ({"canary_steps": "50,25,100"}, "canary_steps"),
        ({"canary_steps": "5,150"}, "canary_steps"),
        ({"ttft_buckets": "2048,512"}, "ttft_buckets"),
        ({"max_ttft_p95_ratio": 0.9}, "max_ttft_p95_ratio"),
        ({"max_output_length_shift": 0}, "max_output_length_shift"),
        ({"degenerate_share": 1.5}, "degenerate_share"),
        ({"step_s": 600, "max_step_s": 60}, "max_step_s"),
        ({"min_requests": 0}, "min_requests"),
    ],
)
def test_values_that_cannot_work_are_refused(raw: dict[str, object], key: str) -> None:
    """Each bad value fails naming its key."""
    with pytest.raises(ConfigError, match=key):
        release_config(raw)


def test_cli_steps_parse_like_the_config_key() -> None:
    """`--canary 10,100` parses; the error names the flag."""
    assert parse_steps("10,100") == (10, 100)
    with pytest.raises(ConfigError, match="--canary"):
        parse_steps("10,x")
