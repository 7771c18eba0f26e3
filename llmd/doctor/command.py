"""The `llmd doctor` verb: its flags, the checks and diagnosis it runs, and how it prints them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from llmd import exitcodes
from llmd.arguments import positive
from llmd.supervisor.findings import Finding, worst

EPILOG = """checks before a deployment: the model directory, its architecture in the installed
vLLM's registry, its tokenizer against its vocabulary and chat template, memory for its weights
plus one sequence of KV cache, torch/vLLM/CUDA/driver versions, and on the CPU build the
instruction set. Then the engine's recent exits as the running daemon diagnosed them, or the
lines of --log FILE (raw engine output, or llmd's JSON log: journalctl -u llmd -o cat); a line
of it that is not UTF-8 is skipped, and how many were is said on stderr.

exit status: 0 no errors, 1 at least one error finding, 66 a --log FILE that cannot be read,
78 a config that does not load.
"""


def add_parser(verbs: Any) -> None:
    """Add `doctor` to the `llmd` subparsers `verbs`."""
    doctor = verbs.add_parser(
        "doctor",
        help="check a deployment before it runs, and diagnose the engine's recent exits",
        description="Check a deployment before it runs and diagnose the engine's recent exits; "
        "every finding has a one-line hint naming the setting to change.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument(
        "--runtime-dir", help="the daemon's runtime directory (default: server.runtime_dir)"
    )
    doctor.add_argument(
        "--log", metavar="FILE", help="diagnose these saved lines instead ('-' reads stdin)"
    )
    doctor.add_argument(
        "--gpu-memory-gib", type=positive, metavar="G", help="size memory for a GPU of G GiB"
    )
    doctor.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the doctor; 0 when nothing is in error, 1 otherwise, 66 (EX_NOINPUT) when --log
    cannot be read, 78 for a bad config."""
    from llmd.config import config_path, load_config
    from llmd.doctor.examine import Boundaries, from_daemon, from_log, pre_deployment
    from llmd.errors import ConfigError
    from llmd.textfiles import log_lines

    path = config_path(args.config)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"llmd doctor: {exc}", file=sys.stderr)
        return exitcodes.CONFIG
    checks = pre_deployment(config, Boundaries(), args.gpu_memory_gib)
    if args.log:
        try:
            with log_lines(args.log) as lines:
                exits = from_log(lines, lines.name)
        except OSError as exc:
            print(f"llmd doctor: --log {args.log}: {exc.strerror}", file=sys.stderr)
            return exitcodes.NO_INPUT
        if lines.warning():
            print(f"llmd doctor: --log {lines.warning()}", file=sys.stderr)
    else:
        exits = from_daemon(Path(args.runtime_dir or config.server.runtime_dir))
    document = {
        "config": str(path),
        "engine": {"kind": config.engine.kind, "model": config.engine.model},
        "checks": [f.to_dict() for f in checks],
        "exits": {
            "source": exits.source,
            "state": exits.state,
            "last_exit": exits.last_exit,
            "diagnosis": [f.to_dict() for f in exits.diagnosis],
        },
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(render(document))
    return 1 if worst([*checks, *exits.diagnosis]) == "error" else 0


def render(document: dict[str, Any]) -> str:
    """The human report of a doctor `document` (the --json shape)."""
    engine, exits = document["engine"], document["exits"]
    lines = [
        f"llmd doctor: {document['config']} (engine {engine['kind']}, model {engine['model']})",
        "",
        "before deployment",
    ]
    lines += _findings([Finding(**item) for item in document["checks"]])
    lines += ["", f"recent engine exits ({exits['source']})"]
    if exits["state"] is not None:
        lines.append(f"  engine {exits['state']}; last exit: {exits['last_exit'] or 'none'}")
    elif exits["last_exit"]:
        lines.append(f"  last exit: {exits['last_exit']}")
    diagnosis = [Finding(**item) for item in exits["diagnosis"]]
    lines += _findings(diagnosis) if diagnosis else ["  nothing to diagnose"]
    return "\n".join(lines)


def _findings(findings: list[Finding]) -> list[str]:
    lines = []
    for f in findings:
        lines.append(f"  {f.severity:<8} {f.check:<14} {f.message}")
        if f.hint and f.severity != "ok":
            lines.append(f"  {'':<8} {'':<14} hint: {f.hint}")
        if f.evidence and f.severity != "ok":
            lines.append(f"  {'':<8} {'':<14} seen: {f.evidence[:160]}")
    return lines
