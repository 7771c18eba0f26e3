"""Usage that survives restarts, on a live llmd over the simulator: what a tenant used is in
`llmd usage` after llmd stopped, and a restarted llmd neither forgets it nor refills the
tenant's budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from llmd.admission.tenants import hash_key
from tests.support.cli import run_llmd
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

DAY = 5000  # the agent's tokens_per_day: a day's refill is 0.06 tokens a second
TENANTS = (
    f'[tenants.agent]\nkeys = ["{hash_key("agent")}"]\ntokens_per_day = {DAY}\n'
    f'[tenants.chat]\nkeys = ["{hash_key("chat")}"]\n'
)


def chat(llmd: LlmdProcess, key: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    answer = httpx.post(
        llmd.base_url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


def usage(workdir: Path) -> dict[str, Any]:
    """`llmd usage --json` of the llmd in `workdir` (no daemon needed)."""
    done = run_llmd(
        *("usage", "--json", "--since", "1h", "--config", str(workdir / "llmd.toml")),
        *("--state-dir", str(workdir / "state")),
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def day_left(llmd: LlmdProcess) -> int:
    (row,) = [t for t in llmd.admin_status()["tenants"] if t["name"] == "agent"]
    (budget,) = row["budgets"]
    return int(budget["remaining"])


def test_usage_and_budgets_survive_a_restart() -> None:
    """Three requests of the agent and one of the chat tenant; llmd stops; `llmd usage` shows
    each tenant's requests and tokens as the engine counted them; llmd starts again with the
    agent's day budget where it was (not refilled); one more request adds to the kept usage."""
    workdir = short_tmpdir("llmd-usage-")
    (workdir / "tenants.toml").write_text(TENANTS)
    config = sim_config(ensure_tiny_model(), admission={"tenants_file": "tenants.toml"})
    with LlmdProcess.running(config, workdir, timeout_s=30) as llmd:
        answers = [chat(llmd, "agent", 40) for _ in range(3)]
        chat(llmd, "chat", 5)
        left = day_left(llmd)
    used = sum(a["prompt_tokens"] + a["completion_tokens"] for a in answers)
    assert DAY - used <= left <= DAY - used + 2  # (the refill of a few seconds: < 1 token)
    kept = {row["tenant"]: row for row in usage(workdir)["usage"]}
    agent = kept["agent"]
    assert (agent["requests"], agent["outcomes"], agent["model"]) == (3, {"ok": 3}, "tiny")
    assert agent["input_tokens"] == sum(a["prompt_tokens"] for a in answers)
    assert agent["output_tokens"] == 120
    assert kept["chat"]["requests"] == 1
    (budget,) = usage(workdir)["budgets"]
    assert budget["tenant"] == "agent" and DAY - used <= budget["remaining"] <= DAY - used + 5
    with LlmdProcess.running(config, workdir, timeout_s=30) as llmd:
        assert DAY - used <= day_left(llmd) <= DAY - used + 5
        chat(llmd, "agent", 10)
    assert {row["tenant"]: row["requests"] for row in usage(workdir)["usage"]} == {
        "agent": 4, "chat": 1,
    }  # fmt: skip
