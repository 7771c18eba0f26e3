"""The `[release]` table: built with the config's strict checks, each bad value named."""

from __future__ import annotations

import re
import tomllib

import pytest

from llmd.config.release import ReleaseConfig, parse_steps, release_config
from llmd.errors import ConfigError
from tests.support.llmd_process import REPO


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


def test_the_defaults_named_in_the_readme_and_etc_llmd_toml_are_the_code_s() -> None:
    """README's canary section (`key` (default N)) and etc/llmd.toml's [release] give the
    same defaults as ReleaseConfig."""
    defaults = ReleaseConfig()
    raw = tomllib.loads((REPO / "etc" / "llmd.toml").read_text())["release"]
    assert release_config(raw) == defaults
    readme = (REPO / "README.md").read_text()
    canary = readme[readme.index("### Canary") :]
    named = re.findall(r"`(\w+)` \((?:default |)([0-9.]+)", " ".join(canary.split()))
    named += re.findall(r"`(\w+)`, ([0-9.]+), per", " ".join(canary.split()))
    assert {key for key, _ in named} >= {
        "max_error_rate_increase",
        "max_rejection_rate_increase",
        "max_empty_rate_increase",
        "max_cut_off_rate_increase",
        "max_ttft_p95_ratio",
        "ttft_slack_s",
        "max_output_length_shift",
        "min_requests",
        "min_bucket_requests",
    }
    for key, value in named:
        assert float(value) == getattr(defaults, key), key
