"""The `llmd` command: `serve` (what systemd runs), `check-config`, the client verbs, `bench`,
`release`, `tune`, `doctor`."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from llmd import exitcodes
from llmd.arguments import (
    Parser,
    add_runtime_dir,
    add_version,
    checked,
    seconds,
)
from llmd.config.tables import check_listen
from llmd.console import import_structlog, import_uvicorn, run_console
from llmd.errors import ConfigError, RuntimeDirInUse
from llmd.runtime import RuntimePaths

# `llmd restart` waits for the drain and for the new engine; the daemon bounds both.
RESTART_TIMEOUT_S = 3600.0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `llmd` console script; exits with the verb's status (llmd/exitcodes.py),
    or with 141 and no traceback when stdout's reader has gone."""

    def verb() -> None:
        arguments = sys.argv[1:] if argv is None else list(argv)
        args = _parser(_named_verb(arguments)).parse_args(arguments)
        sys.exit(args.func(args))

    run_console(verb)


# Every verb. Of the verbs whose parser lives in another module, only the named one's module is
# imported: together (bench, tune, releases, sizing...) they were about 0.1 CPU-s of each client
# verb (measured here), and less of `llmd serve`'s start, whose own modules share their imports.
# `--help`, no verb or a verb not here imports them all.
VERBS = (
    "serve",
    "check-config",
    "status",
    "drain",
    "wake",
    "sleep",
    "resume",
    "restart",
    "reload",
    "guard",
    "bench",
    "tune",
    "doctor",
    "release",
    "deploy",
    "rollback",
    "tenant",
    "usage",
    "hash-key",
)


def _named_verb(arguments: Sequence[str]) -> str | None:
    """The verb `arguments` (argv without the program) start with, when it is one of VERBS;
    else None (`llmd -h serve` shows the help of every verb)."""
    return arguments[0] if arguments and arguments[0] in VERBS else None


def _parser(named: str | None = None) -> argparse.ArgumentParser:
    """`llmd`'s parser. With a verb `named`, of the verbs whose parser lives in another module
    only that one is added (only its module imported); with None, every verb."""

    def wanted(*verbs: str) -> bool:
        return named is None or named in verbs

    parser = Parser(
        prog="llmd",
        description=__doc__,
        epilog=exitcodes.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(parser)
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="run llmd in the foreground (what systemd runs)")
    serve.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
    serve.add_argument(
        "--listen",
        type=checked(check_listen, "--listen"),
        metavar="HOST:PORT",
        help="the public API's address (overrides server.listen)",
    )
    serve.add_argument("--runtime-dir", help="directory for the admin and engine sockets")
    serve.add_argument("--state-dir", help="release records and history (server.state_dir)")
    serve.set_defaults(func=_serve)

    if wanted("check-config"):
        from llmd.check_config import add_parser as add_check_parser

        add_check_parser(verbs)

    status = verbs.add_parser("status", help="show the state of llmd, each engine and each model")
    status.add_argument("--json", action="store_true", help="print the Status snapshot as JSON")
    add_runtime_dir(status)
    status.set_defaults(func=_status)

    drain = verbs.add_parser("drain", help="stop admitting; in-flight requests finish")
    drain.add_argument("--wait", action="store_true", help="return when nothing is in flight")
    drain.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="end what is still in flight after S seconds",
    )
    drain.add_argument(
        "--reject-queued", action="store_true", help="answer requests queued in llmd 503 now"
    )
    drain.add_argument(
        "--engine", help="drain this engine only: it takes no new request, the others serve on"
    )
    add_runtime_dir(drain)
    drain.set_defaults(func=_drain)
    for verb, help_text in (
        ("wake", "wake an on-demand engine now (its swap group must have room)"),
        ("sleep", "put an on-demand engine to sleep now (nothing may be in flight there)"),
    ):
        sub = verbs.add_parser(verb, help=help_text)
        sub.add_argument("--engine", required=True, help="the engine's name")
        add_runtime_dir(sub)
        sub.set_defaults(func=_swap_verb)
    for verb, help_text in (
        ("resume", "admit requests again after a drain"),
        (
            "restart",
            "drain, restart the engines (with reloaded engine tables), resume; an engine asleep "
            "on demand is not woken: its next wake boots a fresh process",
        ),
        (
            "reload",
            "re-read the config: limits, tenants, upstreams, routing, validation, telemetry and "
            "logging apply now; engine changes wait for `llmd restart [--engine NAME]`",
        ),
    ):
        sub = verbs.add_parser(verb, help=help_text)
        if verb != "reload":
            sub.add_argument("--engine", help=f"{verb} this engine only (default: every engine)")
        add_runtime_dir(sub)
        sub.set_defaults(func=_simple_verb)

    guard = verbs.add_parser(
        "guard", help="override the SLO guard until the next reload: off, on, or level N (0-4)"
    )
    guard.add_argument(
        "mode",
        choices=("off", "on", "level"),
        help="off: the guard never degrades service; on: it acts on its own again; level: pin it",
    )
    guard.add_argument("level", nargs="?", type=int, choices=range(5), help="with `level`")
    add_runtime_dir(guard)
    guard.set_defaults(func=_guard)

    if wanted("bench"):
        from llmd.bench.command import add_parser as add_bench_parser

        add_bench_parser(verbs)
    if wanted("tune"):
        from llmd.tune.command import add_parser as add_tune_parser

        add_tune_parser(verbs)
    if wanted("doctor"):
        from llmd.doctor.command import add_parser as add_doctor_parser

        add_doctor_parser(verbs)
    if wanted("release"):
        from llmd.releases.command import add_parser as add_release_parser

        add_release_parser(verbs)
    if wanted("deploy", "rollback"):
        from llmd.releases.deploy_command import add_parser as add_deploy_parser

        add_deploy_parser(verbs, _call)
    if wanted("tenant"):
        from llmd.admin.tenant_command import add_parser as add_tenant_parser

        add_tenant_parser(verbs)
    if wanted("usage"):
        from llmd.usage.command import add_parser as add_usage_parser

        add_usage_parser(verbs)

    hash_key = verbs.add_parser(
        "hash-key", help="print the SHA-256 of an API key read from stdin, for the tenants file"
    )
    hash_key.add_argument(
        "--new", action="store_true", help="make a new random key; print it and its hash"
    )
    hash_key.set_defaults(func=_hash_key)
    return parser


def import_daemon_modules() -> None:
    """Import what `llmd serve` runs (the daemon, its config and logging), with the cyclic
    collector off: its passes over the objects they create, nearly all of which live as long
    as the daemon, cost about 0.05 of the 0.5 CPU-s the import takes (measured here). The
    daemon collects once after start-up and freezes what is left
    (Housekeeping._freeze_start_up). The tests' warm interpreter imports the same
    (tests/support/warm.py)."""
    gc.disable()
    try:
        import_structlog()
        import_uvicorn()
        import llmd.admission.tenants
        import llmd.allocator
        import llmd.config
        import llmd.daemon.daemon
        import llmd.logs  # noqa: F401
    finally:
        gc.enable()


def _serve(args: argparse.Namespace) -> int:
    import_daemon_modules()
    from llmd.admission.tenants import configured_tenants
    from llmd.allocator import fix_mmap_threshold
    from llmd.config import config_path, load_config
    from llmd.daemon.daemon import Daemon
    from llmd.logs import configure_logging

    fix_mmap_threshold()

    try:
        config = load_config(
            config_path(args.config), listen=args.listen, runtime_dir=args.runtime_dir
        )
        configured_tenants(config.admission)
        where = "--runtime-dir" if args.runtime_dir else "server.runtime_dir"
        RuntimePaths(Path(config.server.runtime_dir)).check_socket_paths(
            config.engine_tables, where
        )
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return exitcodes.CONFIG
    configure_logging(config.logging)
    try:
        daemon = Daemon(
            config, listen=args.listen, runtime_dir=args.runtime_dir, state_dir=args.state_dir
        )
        code: int = _run(daemon.serve())
    except OSError as exc:
        return _start_failed(exc)
    except RuntimeDirInUse as exc:
        print(f"llmd: cannot start: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    # The daemon has stopped and logged it. Leave now: the interpreter's teardown costs a second
    # or more once the tokenizer has imported torch (measured here: 1.2 s of a 1.7 s stop).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# OSErrors at start that say this user may not write there: no permission (EACCES, EPERM),
# or a read-only mount (EROFS), which systemd's ProtectSystem=strict makes of a directory
# not named in ReadWritePaths= or StateDirectory=.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def _start_failed(exc: OSError) -> int:
    """Print why `llmd serve` could not start (one line) and give its exit status: 77
    (EX_NOPERM) for a directory it may not write, 78 (EX_CONFIG) for a runtime or state
    directory that is not a directory, else 1."""
    if exc.errno in _NOT_WRITABLE:
        print(
            f"llmd: cannot start: {_os_error(exc)}: run it as the llmd user (systemctl start "
            "llmd), or pass --runtime-dir and --state-dir it may write",
            file=sys.stderr,
        )
        return exitcodes.NO_PERMISSION
    if exc.errno == errno.ENOTDIR:
        print(
            f"llmd: cannot start: {exc.filename} is not a directory (--runtime-dir, "
            "--state-dir, server.runtime_dir or server.state_dir)",
            file=sys.stderr,
        )
        return exitcodes.CONFIG
    print(f"llmd: cannot start: {_os_error(exc)}", file=sys.stderr)
    return exitcodes.FAILURE


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
        print(
            "llmd hash-key: give the key on stdin, e.g. `llmd hash-key < keyfile`", file=sys.stderr
        )
        return exitcodes.USAGE
    print(hash_key(key))
    return 0


def _status(args: argparse.Namespace) -> int:
    status = _call(args, "GET", "/status")
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        from llmd.admin.status_text import format_status
        from llmd.quoting import printable

        print(printable(format_status(status)))  # names and messages from outside, as text
    return 0


def _call(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> Any:
    """One admin call; the decoded answer. On failure prints one line (what happened, what to
    do) and raises SystemExit: exitcodes.UNAVAILABLE when no daemon answers, NO_PERMISSION when
    this user may not open the socket, FAILURE when the daemon refused."""
    from llmd.admin.client import AdminForbidden, AdminRefused, AdminUnreachable, admin_request

    socket = RuntimePaths(Path(args.runtime_dir)).admin_socket
    try:
        return _run(admin_request(socket, method, path, body, timeout_s))
    except AdminForbidden as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        raise SystemExit(exitcodes.NO_PERMISSION) from None
    except AdminUnreachable as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        raise SystemExit(exitcodes.UNAVAILABLE) from None
    except AdminRefused as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        raise SystemExit(exitcodes.FAILURE) from None


def _guard(args: argparse.Namespace) -> int:
    if (args.mode == "level") != (args.level is not None):
        print(
            "llmd guard: a level (0-4) goes after `level`, and only there "
            "(see `llmd guard --help`)",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    from llmd.admin.status_text import guard_line

    mode = f"level {args.level}" if args.mode == "level" else args.mode
    print("slo guard " + guard_line(_call(args, "POST", "/guard", {"mode": mode})))
    return 0


def _drain(args: argparse.Namespace) -> int:
    queued = "reject" if args.reject_queued else "wait"
    body = {"deadline_s": args.timeout, "queued": queued, "engine": args.engine}
    answer = _call(args, "POST", "/drain", body)
    what = f"engine {args.engine}" if args.engine else "llmd"
    print(f"draining {what}: {_live(answer)}")
    if not args.wait:
        return 0
    deadline = time.monotonic() + (args.timeout + 5 if args.timeout is not None else 3600)
    while (left := _left(args)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left is None:
        # llmd began to stop and closed its socket: its own stop drains (and ends what is
        # left at server.drain_timeout_s), so this wait has nothing more to watch.
        print("llmd: llmd stopped during the drain; see systemctl status llmd", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    print("drained" if not left else f"still {left}")
    return 0 if not left else 1


def _live(answer: dict[str, Any]) -> str:
    """'N in flight' (relayed to a backend), with ', M queued' when requests wait in llmd."""
    queued = answer.get("queued") or 0
    return f"{answer['in_flight']} in flight" + (f", {queued} queued" if queued else "")


def _left(args: argparse.Namespace) -> str | None:
    """What a drain still waits for ('' once drained): requests relayed or queued in llmd,
    or relayed to `args.engine`; None once llmd no longer answers (it stopped meanwhile)."""
    from llmd.admin.client import AdminForbidden, AdminUnreachable, admin_request

    socket = RuntimePaths(Path(args.runtime_dir)).admin_socket
    try:
        status = _run(admin_request(socket, "GET", "/status"))
    except AdminForbidden:
        status = _call(args, "GET", "/status")  # says so, and exits
    except AdminUnreachable:
        return None
    if args.engine:
        entry = next((e for e in status.get("engines", []) if e["name"] == args.engine), None)
        in_flight = int(entry["in_flight"]) if entry else 0
        return f"{in_flight} in flight" if in_flight else ""
    return _live(status) if status["in_flight"] or status.get("queued") else ""


def _swap_verb(args: argparse.Namespace) -> int:
    answer = _call(args, "POST", "/" + args.verb, {"engine": args.engine})
    if args.verb == "wake":
        print(
            f"engine {args.engine} {answer['state']} "
            f"(a wake takes about {answer['predicted_wake_s']:g} s)"
        )
    else:
        print(f"engine {args.engine} {answer['state']}")
    return 0


def _simple_verb(args: argparse.Namespace) -> int:
    # A restart drains, then waits for the new engines to serve (engine.start_timeout_s).
    engine = getattr(args, "engine", None)
    body = {"engine": engine} if engine else None
    answer = _call(args, "POST", "/" + args.verb, body, timeout_s=RESTART_TIMEOUT_S)
    if args.verb == "reload":
        print(reload_message(answer))
    elif args.verb == "restart":
        print(restart_message(answer, engine))
    else:
        what = f"engine {engine} takes requests again" if engine else "admitting requests"
        print(f"{what}; {_phases(answer)}")
    return 0


def _phases(answer: dict[str, Any]) -> str:
    """'engine serving', or each engine's phase when there are several; `, drained` after
    one an operator drained."""
    from llmd.admin.status_text import engine_state

    engines = answer.get("engines") or {}
    if len(engines) <= 1:
        one = next(iter(engines.values()), {"state": answer["engine"]})
        return f"engine {engine_state(one)}"
    return "engines " + ", ".join(f"{name} {engine_state(e)}" for name, e in engines.items())


def reload_message(answer: dict[str, Any]) -> str:
    """What `llmd reload` prints: what applied, and what waits for which restart."""
    lines = [
        "reloaded: limits, tenants, upstreams, routing, validation, telemetry and logging apply now"
    ]
    if answer.get("engine_pending"):
        engines = answer.get("engines_pending") or []
        verb = f"llmd restart --engine {engines[0]}" if len(engines) == 1 else "llmd restart"
        lines.append(f"kept for the next `{verb}`: {', '.join(answer['engine_pending'])}")
    if answer.get("llmd_restart"):
        lines.append(
            f"needs llmd itself restarted (systemctl restart llmd): "
            f"{', '.join(answer['llmd_restart'])}"
        )
    return "\n".join(lines)


def restart_message(answer: dict[str, Any], engine: str | None = None) -> str:
    """What `llmd restart [--engine NAME]` prints: whether the engine(s) restarted, which
    asleep on demand were left asleep to boot afresh at their next wake, with the engine
    settings a reload had kept pending and this restart applied."""
    on_wake = answer.get("boots_on_wake") or []
    if engine is not None and engine not in (answer.get("engines") or {engine: None}):
        message = f"engine {engine} removed"
    elif engine is not None and engine in on_wake:
        message = f"engine {engine} is asleep: not woken; its next wake boots a fresh process"
    elif not answer["restarted"] and on_wake:
        message = f"asleep, not woken (each boots a fresh process when woken): {', '.join(on_wake)}"
    elif not answer["restarted"]:
        message = "no engine was running (the next boot uses the current config)"
    elif engine is not None:
        message = f"engine {engine} restarted; {answer['engines'][engine]['state']}"
    else:
        message = f"engine restarted; {_phases(answer)}"
        if on_wake:
            message += f" (asleep, not woken: {', '.join(on_wake)} boot afresh when woken)"
    if answer.get("applied"):
        message += f"; applied {', '.join(answer['applied'])}"
    return message


def _os_error(exc: OSError) -> str:
    """An OSError in words, without Python's '[Errno N]': 'Permission denied: /run/llmd'."""
    what = exc.strerror or str(exc)
    where = exc.filename if exc.filename is not None else None
    return f"{what}: {where}" if where else what


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
