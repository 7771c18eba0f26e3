"""`llmd deploy NAME` and `llmd rollback`: the verbs that ask the running daemon (its admin API)
to switch an engine's release, and print how it ended."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from llmd.arguments import add_runtime_dir, checked, positive_seconds
from llmd.config.release import parse_steps

# A replace waits for a drain, two boots and two smoke gates at worst; the daemon bounds each.
DEPLOY_TIMEOUT_S = 7200.0

Call = Callable[..., Any]


def add_parser(verbs: Any, call: Call) -> None:
    """Add `deploy` and `rollback` to the `llmd` subparsers `verbs`; `call(args, method, path,
    body, timeout_s)` is the CLI's admin call (it prints the daemon's error and exits)."""
    deploy = verbs.add_parser(
        "deploy",
        help="switch an engine to a release: drain, stop, boot it, smoke gate; on failure the "
        "old release boots again",
    )
    deploy.add_argument("name", help="the release (`llmd release list`)")
    deploy.add_argument("--engine", help="the engine (default: the only one)")
    deploy.add_argument(
        "--canary",
        type=checked(parse_steps, "--canary"),
        metavar="STEPS",
        help="canary: the release boots beside the old one and takes these shares of traffic "
        "in turn, e.g. 5,25,50,100 (default: replace)",
    )
    deploy.add_argument(
        "--step-s",
        type=positive_seconds,
        metavar="S",
        help="least dwell per canary step (with --canary)",
    )
    add_runtime_dir(deploy)
    deploy.set_defaults(func=lambda args: _deploy(args, call))
    rollback = verbs.add_parser(
        "rollback",
        help="abort the deploy under way, or return the engine to its previous release",
    )
    rollback.add_argument("--engine", help="the engine (default: the only one)")
    add_runtime_dir(rollback)
    rollback.set_defaults(func=lambda args: _rollback(args, call))


def _deploy(args: argparse.Namespace, call: Call) -> int:
    body = {
        "release": args.name,
        "engine": args.engine,
        "strategy": "canary" if args.canary else "replace",
        "canary": args.canary,
        "step_s": args.step_s,
        "wait": True,
    }
    return _report(call(args, "POST", "/deploy", body, DEPLOY_TIMEOUT_S))


def _rollback(args: argparse.Namespace, call: Call) -> int:
    body = {"engine": args.engine, "wait": True}
    return _report(call(args, "POST", "/rollback", body, DEPLOY_TIMEOUT_S))


def _report(snapshot: dict[str, Any]) -> int:
    """Print how the deploy ended; 0 when the new release serves."""
    print(deploy_message(snapshot))
    return 0 if snapshot.get("phase") == "promoted" else 1


def deploy_message(snapshot: dict[str, Any]) -> str:
    """One line: which deploy, its outcome and why (a smoke gate's report follows it)."""
    phase = snapshot.get("phase")
    serving = {"promoted": snapshot.get("new"), "failed": "no release"}.get(
        str(phase), snapshot.get("old")
    )
    reason = snapshot.get("reason") or ""
    head, _, rest = reason.partition("\n")
    line = (
        f"{snapshot.get('deploy')}: {phase} on engine {snapshot.get('engine')}; "
        f"{serving} serves" + (f" ({head})" if head else "")
    )
    return line + ("\n" + rest if rest else "")
