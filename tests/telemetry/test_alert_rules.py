"""The alert rules that ship (etc/prometheus/llmd-rules.yml): Prometheus's own promtool checks
them and runs their unit tests over fixture series (tests/data/prometheus/), in which every
alert fires once and stays quiet once; each says what to look at first, over series llmd
exports. promtool comes with Debian's `prometheus` package (.ci/run installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.telemetry.test_metrics import SERIES

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "etc" / "prometheus" / "llmd-rules.yml"
RULE_TESTS = REPO / "tests" / "data" / "prometheus" / "llmd-rules-test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: apt-get install prometheus (.ci/run does)")
    return found


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    """`promtool check rules` finds every rule well formed."""
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in run.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    """`promtool test rules` over the fixture series: every expectation holds."""
    run = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_is_proven_to_fire_and_to_stay_quiet() -> None:
    """Each alert of the file is expected firing (with its annotations) at one evaluation
    and silent at another in the unit tests."""
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            expected = check["exp_alerts"]
            (fired if expected else quiet).add(check["alertname"])
            assert all("exp_annotations" in alert for alert in expected), check
    names = {rule["alert"] for rule in alerts()}
    assert fired == names and quiet == names


def test_each_alert_says_what_to_look_at_and_reads_llmds_series() -> None:
    """Every alert has a severity, a summary and a description naming a command or a panel
    to look at first; every series it reads is one llmd exports (the /metrics contract)."""
    exported = set(SERIES)
    for rule in alerts():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and "llmd" in annotations["summary"]
        assert re.search(r"`llmd [a-z]|llmd-top", annotations["description"]), rule["alert"]
        for name in re.findall(r"\bllmd_[a-z0-9_]+", rule["expr"]):
            family = re.sub(r"_(bucket|total|sum|count)$", "", name)
            assert family in exported, (rule["alert"], name)
