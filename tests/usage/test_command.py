"""`llmd usage` as text: a row per tenant and model with requests by outcome and tokens, then
the budgets as last saved; `--tenant` keeps one; an empty state directory says none is kept."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmd.cli import _parser
from llmd.usage.records import BucketState, UsageBatch
from llmd.usage.store import UsageStore


def run(*args: str) -> int:
    parsed = _parser().parse_args(["usage", *args])
    code: int = parsed.func(parsed)
    return code


def test_the_table_and_the_budgets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows add up per tenant and model; budgets show what is left, refilled since saved."""
    now = time.time()
    batch = UsageBatch()
    batch.add("agent", "tiny", "ok", 1200, 300, now)
    batch.add("agent", "tiny", "rejected", 0, 0, now)
    batch.add("chat", "tiny", "cancelled", 10, 2, now)
    store = UsageStore.in_dir(tmp_path)
    store.write(batch.rows, [BucketState("agent", "tokens_per_day", 10_000, 0.0, 2500, now)])
    store.close()
    assert run("--state-dir", str(tmp_path), "--since", "2h") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == [
        "tenant", "model", "requests", "ok", "rejected", "cancelled", "aborted", "error",
        "tokens", "in", "tokens", "out",
    ]  # fmt: skip
    assert out[2].split() == ["agent", "tiny", "2", "1", "1", "0", "0", "0", "1,200", "300"]
    assert out[3].split()[:3] == ["chat", "tiny", "1"]
    assert out[-1].split()[:4] == ["agent", "tokens_per_day", "2,500", "10,000"]
    assert run("--state-dir", str(tmp_path), "--tenant", "chat") == 0
    assert "agent" not in capsys.readouterr().out
    assert run("--state-dir", str(tmp_path / "none")) == 0
    assert capsys.readouterr().out.endswith("none kept\n")
