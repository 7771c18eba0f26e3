"""The `llmd-top` command: find the daemon's admin socket, run the dashboard."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from llmd.arguments import Parser, add_version, positive_seconds
from llmd.config import ServerConfig
from llmd.console import run_console
from llmd.runtime import RuntimePaths


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `llmd-top` console script: usage errors exit 64 in one line, a closed
    stdout (`llmd-top --help | head -1`) ends quietly with 141, Ctrl-C as SIGINT does."""

    def top() -> None:
        args = _parser().parse_args(argv)
        from llmd.tui.app import TopApp
        from llmd.tui.client import DaemonClient

        paths = RuntimePaths(Path(args.runtime_dir))
        socket = Path(args.socket) if args.socket else paths.admin_socket
        TopApp(DaemonClient(socket), interval_s=args.interval, readonly=args.readonly).run()

    run_console(top)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="llmd-top",
        description="Live dashboard of a running llmd: engine, KV cache, GPUs, queues, tenants, "
        "sequences, latency, events; drain, resume, restart and cancel from the keyboard.",
        epilog="exit status: 0 when you quit, 64 on a usage error (see `llmd --help` for all)",
    )
    add_version(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--socket", help="the admin socket (default RUNTIME_DIR/admin.sock)")
    where.add_argument(
        "--runtime-dir",
        default=ServerConfig.runtime_dir,
        help=f"the daemon's runtime directory (default {ServerConfig.runtime_dir})",
    )
    parser.add_argument(
        "--readonly", action="store_true", help="watch only: no drain, resume, restart or cancel"
    )
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        default=1.0,
        metavar="S",
        help="refresh every S seconds (1)",
    )
    return parser
