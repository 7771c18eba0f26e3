"""`llmd tenant add|key|revoke|list` end to end, against a live llmd on the simulator: a tenant
added with a budget is served at once with OpenAI's x-ratelimit headers and refused past its
budget; a rotated key replaces the old one, a revoked key is refused within a second; the file
keeps its comments and never holds a key, only digests."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.cli import run_llmd
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

FIRST = (
    "# the tenants of this test\n[tenants.ops]  # the operator, who reads /metrics\n"
    f'keys = ["{hash_key("ops")}"]\nmetrics = true\n'
)


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with a tenants file of one tenant (and its comments)."""
    workdir = short_tmpdir("llmd-tenant-")
    (workdir / "tenants.toml").write_text(FIRST)
    config = sim_config(ensure_tiny_model(), admission={"tenants_file": "tenants.toml"})
    with LlmdProcess.running(config, workdir, timeout_s=30) as process:
        yield process


def tenant(llmd: LlmdProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`llmd tenant ARGS` with llmd's config and runtime directory."""
    config = str(llmd.runtime_dir.parent / "llmd.toml")
    return run_llmd("tenant", *args, "--config", config, "--runtime-dir", str(llmd.runtime_dir))


def chat(llmd: LlmdProcess, key: str, max_tokens: int) -> httpx.Response:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(
        llmd.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=60
    )


def test_the_tenant_verbs_end_to_end(llmd: LlmdProcess) -> None:
    """add prints a key once (stdout alone) and the daemon serves it at once, with
    x-ratelimit-*-tokens; past its output budget a 429 budget_exceeded with Retry-After; a
    request over the whole budget a 400; rotate: the old key 401, the new one served; revoke:
    401 within a second; list; the file keeps its comments and holds digests only."""
    added = tenant(llmd, "add", "agent", "--class", "interactive",
                   "--budget", "output_tokens_per_minute=100")  # fmt: skip
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    assert key.startswith("llmd-") and "llmd reloaded its tenants (2)" in added.stderr
    first = chat(llmd, key, 60)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-limit-tokens"] == "100"
    assert first.headers["x-ratelimit-remaining-tokens"] == "40"
    assert first.headers["x-ratelimit-reset-tokens"].endswith("s")
    over = chat(llmd, key, 60)
    assert over.status_code == 429, over.text
    assert over.json()["error"]["code"] == "budget_exceeded"
    assert int(over.headers["retry-after"]) >= 1
    assert int(over.headers["x-ratelimit-remaining-tokens"]) < 60
    assert chat(llmd, key, 101).status_code == 400

    rotated = tenant(llmd, "key", "agent", "--rotate")
    assert rotated.returncode == 0, rotated.stderr
    new_key = rotated.stdout.strip()
    assert chat(llmd, key, 1).status_code == 401
    assert chat(llmd, new_key, 1).status_code == 200

    revoked = tenant(llmd, "revoke", "agent")
    done = time.monotonic()
    assert revoked.returncode == 0 and "1 key revoked" in revoked.stderr
    assert chat(llmd, new_key, 1).status_code == 401
    assert time.monotonic() - done < 1.0

    listed = tenant(llmd, "list", "--json")
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["agent"]["keys"] == 0 and rows["agent"]["output_tokens_per_minute"] == 100
    assert rows["agent"]["highest_class"] == "interactive" and rows["ops"]["keys"] == 1
    text = (llmd.runtime_dir.parent / "tenants.toml").read_text()
    assert text.startswith(FIRST) and key not in text and new_key not in text
    status = llmd.admin_status()
    (row,) = [t for t in status["tenants"] if t["name"] == "agent"]
    assert row["budgets"][0]["name"] == "output_tokens_per_minute"
    metrics = httpx.get(
        llmd.base_url + "/metrics", headers={"authorization": "Bearer ops"}, timeout=10
    ).text
    assert 'llmd_rejections_total{reason="budget_exceeded"} 1.0' in metrics
    assert (
        'llmd_tenant_budget_remaining_tokens{budget="output_tokens_per_minute",tenant="agent"}'
        in metrics
    )


def test_a_refused_verb_changes_nothing(llmd: LlmdProcess) -> None:
    """A taken name, an unknown tenant or a bad budget: exit 1 with the reason, the file as it
    was."""
    path = llmd.runtime_dir.parent / "tenants.toml"
    before = path.read_text()
    for args, why in (
        (("add", "ops"), "already in"),
        (("key", "nobody", "--rotate"), "no tenant nobody"),
        (("add", "x", "--budget", "tokens_per_day=-1"), "a whole number >= 0"),
        (("add", "x", "--budget", "max_kv_share=2"), "a share in [0, 1]"),
    ):
        done = tenant(llmd, *args)
        assert done.returncode == 1 and why in done.stderr, (args, done.stderr)
    assert path.read_text() == before


def test_an_edit_of_a_file_the_running_llmd_does_not_read_says_so(llmd: LlmdProcess) -> None:
    """`llmd tenant add` with a config naming another tenants file than the running llmd's:
    exit 1, naming both files; the running llmd does not know the tenant (401)."""
    elsewhere = short_tmpdir("llmd-tenant-other-")
    config = elsewhere / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model(), admission={"tenants_file": "other.toml"}))
    added = run_llmd(
        "tenant", "add", "stray", "--config", str(config), "--runtime-dir", str(llmd.runtime_dir)
    )
    reads = llmd.runtime_dir.parent / "tenants.toml"
    assert added.returncode == 1, added.stderr
    assert f"reads {reads.resolve()}, not {elsewhere / 'other.toml'}" in added.stderr
    assert "reloaded" not in added.stderr
    assert chat(llmd, added.stdout.strip(), 1).status_code == 401
