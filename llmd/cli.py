"""The `llmd` command: `serve` (what systemd runs), `check-config`, and the client verbs."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from llmd.config import ServerConfig, config_path, load_config
from llmd.errors import ConfigError
from llmd.runtime import RuntimePaths

EXIT_USAGE = 2
# sysexits.h EX_CONFIG: the configuration is wrong; also in the unit's RestartPreventExitStatus.
EXIT_CONFIG = 78


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `llmd` console script; exits with the verb's status."""
    args = _parser().parse_args(argv)
    sys.exit(args.func(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmd", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="run llmd in the foreground (what systemd runs)")
    serve.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
    serve.add_argument("--listen", help="HOST:PORT for the public API (overrides server.listen)")
    serve.add_argument("--runtime-dir", help="directory for the admin and engine sockets")
    serve.set_defaults(func=_serve)

    check = verbs.add_parser("check-config", help="validate a config file without starting")
    check.add_argument("path", nargs="?", help="config file (default as for serve)")
    check.set_defaults(func=_check_config)

    status = verbs.add_parser("status", help="show the daemon's and the engine's state")
    status.add_argument("--json", action="store_true", help="print the Status snapshot as JSON")
    status.add_argument("--runtime-dir", default=ServerConfig.runtime_dir)
    status.set_defaults(func=_status)

    hash_key = verbs.add_parser(
        "hash-key", help="print the SHA-256 of an API key read from stdin, for the tenants file"
    )
    hash_key.add_argument(
        "--new", action="store_true", help="make a new random key; print it and its hash"
    )
    hash_key.set_defaults(func=_hash_key)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from llmd.daemon import Daemon
    from llmd.logs import configure_logging

    try:
        config = load_config(
            config_path(args.config), listen=args.listen, runtime_dir=args.runtime_dir
        )
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(config.logging)
    try:
        code: int = _run(Daemon(config).serve())
        return code
    except OSError as exc:
        print(f"llmd: cannot start: {exc}", file=sys.stderr)
        return 1


def _check_config(args: argparse.Namespace) -> int:
    path = config_path(args.path)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(
        f"{path}: ok (engine {config.engine.kind}, model {config.engine.model_name}, "
        f"listen {config.server.listen})"
    )
    return 0


def _hash_key(args: argparse.Namespace) -> int:
    """Hash a key from stdin (kept out of argv, so out of shell history and `ps`)."""
    import secrets

    from llmd.admission.tenants import hash_key

    if args.new:
        key = "llmd-" + secrets.token_urlsafe(32)
        print(f"key:    {key}\nsha256: {hash_key(key)}")
        return 0
    key = sys.stdin.readline().strip()
    if not key:
        print("llmd: give the key on stdin, e.g. `llmd hash-key < keyfile`", file=sys.stderr)
        return EXIT_USAGE
    print(hash_key(key))
    return 0


def _status(args: argparse.Namespace) -> int:
    from llmd.admin.client import AdminUnreachable, admin_request

    socket = RuntimePaths(Path(args.runtime_dir)).admin_socket
    try:
        status = _run(admin_request(socket, "GET", "/status"))
    except AdminUnreachable as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return 3  # LSB: program is not running
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(format_status(status))
    return 0


def format_status(status: dict[str, Any]) -> str:
    """The human form of a Status snapshot (as JSON-decoded), a few aligned lines."""
    engine = status["engine"]
    uptime = engine["uptime_s"]
    last_exit = (
        f"{engine['last_exit_reason']} ({engine['last_exit_detail']})"
        if engine["last_exit_reason"]
        else "-"
    )
    rows = [
        (
            "engine",
            f"{engine['state']}  pid {engine['pid'] or '-'}  {engine['version'] or ''}".rstrip(),
        ),
        ("model", f"{engine['model']}  max_model_len {engine['max_model_len'] or '-'}"),
        ("uptime", _duration(uptime) if uptime is not None else "-"),
        ("restarts", str(engine["restarts"])),
        ("last exit", last_exit),
        (
            "llmd",
            f"{status['llmd_version']} on {status['listen']}  in flight {status['in_flight']}"
            f"  draining {'yes' if status['draining'] else 'no'}",
        ),
    ]
    return "\n".join(f"{name:<10} {value}" for name, value in rows)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m {secs}s" if hours else f"{minutes}m {secs}s"


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run `coro` on uvloop when installed (uvicorn[standard] brings it), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


if __name__ == "__main__":
    main()
