"""How llmd-top says what releases run: the release in the header, and one line per deploy in
progress (engine, old -> new, strategy, phase, step, share, verdict)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

Deploy = dict[str, Any]  # one item of the snapshot's `deploys`

# The phases of an ended deploy; `interrupted`: llmd's stop cut it (llmd/releases/orchestrator.py).
ENDED = frozenset({"promoted", "rolled_back", "failed", "interrupted"})


def in_progress(deploy: Deploy) -> bool:
    """Whether the deploy has not ended yet."""
    return deploy.get("phase") not in ENDED


def deploy_lines(line: Text, deploys: list[Deploy]) -> None:
    """Append a line to `line` for each deploy in progress: `DEPLOY main r1 -> r2 · replace ·
    smoking_new · step 1/4 · share 5% · verdict hold (why)` (`a` aborts it)."""
    for deploy in filter(in_progress, deploys):
        steps = deploy.get("steps") or []
        step = deploy.get("step")
        verdict = deploy.get("verdict") or {}
        line.append("\n")
        line.append(" DEPLOY ", style="bold reverse cyan")
        line.append(f" {deploy['engine']} {deploy['old']} → {deploy['new']}", style="bold")
        line.append(f" · {deploy['strategy']} · {deploy['phase']}")
        if deploy["strategy"] == "canary":
            line.append(f" · step {step or '-'}/{len(steps)} · share {deploy['share']}%")
        if verdict:
            line.append(f" · verdict {verdict.get('decision')}")
            if verdict.get("reason"):
                line.append(f" ({verdict['reason']})", style="dim")
        line.append(" · a aborts", style="dim")
