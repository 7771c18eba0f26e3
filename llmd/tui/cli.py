"""The `llmd-top` command: find the daemon's admin socket, run the dashboard."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from llmd.arguments import positive_seconds
from llmd.config import ServerConfig
from llmd.runtime import RuntimePaths


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `llmd-top` console script."""
    args = _parser().parse_args(argv)
    from llmd.tui.app import TopApp
    from llmd.tui.client import DaemonClient

    socket = Path(args.socket) if args.socket else RuntimePaths(Path(args.runtime_dir)).admin_socket
    TopApp(DaemonClient(socket), interval_s=args.interval, readonly=args.readonly).run()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmd-top",
        description="Live dashboard of a running llmd: engine, KV cache, GPUs, queues, tenants, "
        "sequences, latency, events; drain, resume, restart and cancel from the keyboard.",
    )
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
