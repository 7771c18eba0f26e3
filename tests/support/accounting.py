"""What a test daemon accounted for a request: its counters, status tallies and log line."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmd.admission.tenants import hash_key
from tests.support.llmd_process import LlmdProcess
from tests.support.waiting import wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# The key /metrics is read with: a daemon with tenants needs one with `metrics = true`
# (`tenant_with_metrics()` in its tenants file); one without keys ignores it.
METRICS_KEY = "key-metrics"


def tenant_with_metrics() -> str:
    """A tenants-file table whose key (METRICS_KEY) may read /metrics."""
    return f'[tenants.prometheus]\nkeys = ["{hash_key(METRICS_KEY)}"]\nmetrics = true\n'


def samples(llmd: LlmdProcess) -> Samples:
    """Every sample of llmd's /metrics, by name and labels."""
    headers = {"authorization": f"Bearer {METRICS_KEY}"}
    text = httpx.get(llmd.base_url + "/metrics", headers=headers, timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def log_lines(llmd: LlmdProcess, request_id: str) -> list[dict[str, Any]]:
    """The JSON log lines of `request_id`."""
    return [r for r in llmd.log_records() if r.get("request_id") == request_id]


@dataclasses.dataclass
class Tally:
    """llmd's counts at one moment, to compare with a later one."""

    metrics: Samples
    status: dict[str, Any]

    @classmethod
    def take(cls, llmd: LlmdProcess) -> Tally:
        return cls(samples(llmd), llmd.admin_status())

    def rejections(self, code: str) -> float:
        return self.metrics.get(("llmd_rejections_total", frozenset({("reason", code)})), 0.0)


def assert_counted_as_rejection(
    llmd: LlmdProcess, before: Tally, request_id: str, code: str, status: int
) -> None:
    """The request `request_id` was accounted as one rejection with `code`: in
    llmd_rejections_total{reason}, in the status's rejections (not its errors), and in its
    log line (outcome `rejected`)."""

    def finished() -> list[dict[str, Any]]:
        return [r for r in log_lines(llmd, request_id) if r["event"] == "request_finished"]

    # The request_finished line (written just after the answer) is the last of its accounting.
    assert wait_for(lambda: bool(finished()), timeout_s=15)
    after = Tally.take(llmd)
    assert after.rejections(code) - before.rejections(code) == 1
    counts, earlier = after.status["counts"], before.status["counts"]
    assert counts["rejections"].get(code, 0) - earlier["rejections"].get(code, 0) == 1
    assert counts["errors"] == earlier["errors"]
    (line,) = finished()
    assert (line["outcome"], line["code"], line["status"]) == ("rejected", code, status)
