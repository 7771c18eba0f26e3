"""The `llmd` command: `serve` (what systemd runs), `check-config`, the client verbs, `bench`,
`release`, `tune`, `doctor`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from llmd.config import ServerConfig, config_path, load_config
from llmd.errors import ConfigError, RuntimeDirInUse
from llmd.runtime import RuntimePaths

EXIT_USAGE = 2
# sysexits.h EX_CONFIG: the configuration is wrong; also in the unit's RestartPreventExitStatus.
EXIT_CONFIG = 78
# `llmd restart` waits for the drain and for the new engine; the daemon bounds both.
RESTART_TIMEOUT_S = 3600.0


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

    check = verbs.add_parser(
        "check-config",
        help="validate a config file without starting, and size the engine's memory",
        description="Validate a config file, then size the plan from the model's config.json: "
        "KV bytes per token, the KV tokens the engine settings leave, and warnings.",
    )
    check.add_argument("path", nargs="?", help="config file (default as for serve)")
    check.add_argument(
        "--gpu-memory-gib",
        type=float,
        metavar="G",
        help="plan for a GPU of G GiB instead of the one NVML sees",
    )
    check.add_argument(
        "--typical-tokens",
        type=int,
        metavar="N",
        help="prompt + output tokens of a typical request (default 2048, at most max-model-len)",
    )
    check.set_defaults(func=_check_config)

    status = verbs.add_parser("status", help="show the daemon's and the engine's state")
    status.add_argument("--json", action="store_true", help="print the Status snapshot as JSON")
    status.add_argument("--runtime-dir", default=ServerConfig.runtime_dir)
    status.set_defaults(func=_status)

    drain = verbs.add_parser("drain", help="stop admitting; in-flight requests finish")
    drain.add_argument("--wait", action="store_true", help="return when nothing is in flight")
    drain.add_argument("--timeout", type=float, help="end what is still in flight after S seconds")
    drain.add_argument(
        "--reject-queued", action="store_true", help="answer requests queued in llmd 503 now"
    )
    drain.add_argument("--runtime-dir", default=ServerConfig.runtime_dir)
    drain.set_defaults(func=_drain)
    for verb, help_text in (
        ("resume", "admit requests again after a drain"),
        ("restart", "drain, restart the engine (with a reloaded engine table), resume"),
        (
            "reload",
            "re-read the config: limits, tenants, validation, telemetry and logging apply now; "
            "engine changes wait for `llmd restart`",
        ),
    ):
        sub = verbs.add_parser(verb, help=help_text)
        sub.add_argument("--runtime-dir", default=ServerConfig.runtime_dir)
        sub.set_defaults(func=_simple_verb)

    from llmd.bench.command import add_parser as add_bench_parser
    from llmd.doctor.command import add_parser as add_doctor_parser
    from llmd.tune.command import add_parser as add_tune_parser

    add_bench_parser(verbs)
    add_tune_parser(verbs)
    add_doctor_parser(verbs)

    from llmd.releases.command import add_parser as add_release_parser

    add_release_parser(verbs)

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
        daemon = Daemon(config, listen=args.listen, runtime_dir=args.runtime_dir)
        code: int = _run(daemon.serve())
    except (OSError, RuntimeDirInUse) as exc:
        print(f"llmd: cannot start: {exc}", file=sys.stderr)
        return 1
    # The daemon has stopped and logged it. Leave now: the interpreter's teardown costs a second
    # or more once the tokenizer has imported torch (measured here: 1.2 s of a 1.7 s stop).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
    from llmd.errors import SizingError
    from llmd.sizing.engine import plan_engine
    from llmd.sizing.report import format_plan

    try:
        plan, memory = plan_engine(
            config.engine, planned_gib=args.gpu_memory_gib, typical_tokens=args.typical_tokens
        )
    except SizingError as exc:
        print(f"sizing: skipped: {exc}")
        return 0
    print(f"sizing ({Path(config.engine.model) / 'config.json'}):")
    print(format_plan(plan, memory))
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
    status = _call(args, "GET", "/status")
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(format_status(status))
    return 0


def _call(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> Any:
    """One admin call; prints the daemon's error and raises SystemExit(3) / (1) on failure."""
    from llmd.admin.client import AdminRefused, AdminUnreachable, admin_request

    socket = RuntimePaths(Path(args.runtime_dir)).admin_socket
    try:
        return _run(admin_request(socket, method, path, body, timeout_s))
    except AdminUnreachable as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        raise SystemExit(3) from exc  # LSB: program is not running
    except AdminRefused as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        raise SystemExit(1) from exc


def _drain(args: argparse.Namespace) -> int:
    queued = "reject" if args.reject_queued else "wait"
    answer = _call(args, "POST", "/drain", {"deadline_s": args.timeout, "queued": queued})
    print(f"draining: {_live(answer)}")
    if not args.wait:
        return 0
    deadline = time.monotonic() + (args.timeout + 5 if args.timeout is not None else 3600)
    while (live := _call(args, "GET", "/status")) and time.monotonic() < deadline:
        if not live["in_flight"] and not live.get("queued"):
            break
        time.sleep(0.5)
    done = not live["in_flight"] and not live.get("queued")
    print("drained" if done else f"still {_live(live)}")
    return 0 if done else 1


def _live(answer: dict[str, Any]) -> str:
    """'N in flight' (relayed to the engine), with ', M queued' when requests wait in llmd."""
    queued = answer.get("queued") or 0
    return f"{answer['in_flight']} in flight" + (f", {queued} queued" if queued else "")


def _simple_verb(args: argparse.Namespace) -> int:
    # A restart drains, then waits for the new engine to serve (engine.start_timeout_s).
    answer = _call(args, "POST", "/" + args.verb, timeout_s=RESTART_TIMEOUT_S)
    if args.verb == "reload":
        print(reload_message(answer))
    elif args.verb == "restart":
        print(restart_message(answer))
    else:
        print(f"admitting requests; engine {answer['engine']}")
    return 0


def reload_message(answer: dict[str, Any]) -> str:
    """What `llmd reload` prints: what applied, and what waits for which restart."""
    lines = ["reloaded: limits, tenants, validation, telemetry and logging apply now"]
    if answer.get("engine_pending"):
        lines.append(f"kept for the next `llmd restart`: {', '.join(answer['engine_pending'])}")
    if answer.get("llmd_restart"):
        lines.append(
            f"needs llmd itself restarted (systemctl restart llmd): "
            f"{', '.join(answer['llmd_restart'])}"
        )
    return "\n".join(lines)


def restart_message(answer: dict[str, Any]) -> str:
    """What `llmd restart` prints: whether the engine restarted, with the engine settings a
    reload had kept pending and this restart applied."""
    if not answer["restarted"]:
        message = "no engine was running (the next boot uses the current config)"
    else:
        message = f"engine restarted; engine {answer['engine']}"
    if answer.get("applied"):
        message += f"; applied {', '.join(answer['applied'])}"
    return message


def format_status(status: dict[str, Any]) -> str:
    """The human form of a Status snapshot (as JSON-decoded): a compact, aligned summary.

    Sections a daemon did not send (an older llmd) are left out.
    """
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
        *[
            ("diagnosis", f"{f['message']}; hint: {f['hint']}")
            for f in (engine.get("diagnosis") or ())[:1]
            if f["severity"] == "error"
        ],
        (
            "llmd",
            f"{status['llmd_version']} on {status['listen']}  in flight {status['in_flight']}"
            f"  queued {status.get('queued', 0)}  draining {'yes' if status['draining'] else 'no'}",
        ),
    ]
    if "kv_cache" in status:
        rows += _load_rows(status)
    return "\n".join(f"{name:<10} {value}" for name, value in rows)


def _load_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the engine load, GPUs, queues, latency, throughput and counts."""
    engine, kv = status["engine"], status["kv_cache"]
    capacity = f" of {kv['capacity_tokens']:,} tokens" if kv["capacity_tokens"] else ""
    rows = [
        (
            "load",
            f"KV {_percent(kv['usage'])}{capacity}  running {_num(engine['running'])}"
            f"  waiting {_num(engine['waiting'])}",
        )
    ]
    gpus = status["gpus"]
    for gpu in gpus["devices"]:
        memory = (
            f"{gpu['memory_used_bytes'] / 2**30:.1f}/{gpu['memory_total_bytes'] / 2**30:.1f} GiB"
            if gpu["memory_total_bytes"]
            else "- GiB"
        )
        rows.append(
            (
                f"gpu {gpu['index']}",
                f"{gpu['name']}  {_percent(gpu['utilization'])}  {memory}"
                f"  {_num(gpu['temperature_c'])} C  {_num(gpu['power_w'])} W",
            )
        )
    if not gpus["devices"]:
        rows.append(("gpu", f"none ({gpus['reason']})"))
    rows.append(
        (
            "queues",
            "  ".join(
                f"{q['name']} {q['depth']}"
                + (f" (oldest {q['oldest_wait_s']:.1f}s)" if q["oldest_wait_s"] else "")
                for q in status["queues"]
            ),
        )
    )
    phases = {"queued": 0, "prefill": 0, "decode": 0}
    for sequence in status["sequences"]:
        phases[sequence["phase"]] = phases.get(sequence["phase"], 0) + 1
    rows.append(("sequences", "  ".join(f"{name} {n}" for name, n in phases.items())))
    window = status["latency"]["last_1m"]
    rows.append(
        (
            "latency 1m",
            "  ".join(
                f"{label} {_ms(window[key]['p50'])}/{_ms(window[key]['p95'])}"
                f"/{_ms(window[key]['p99'])}"
                for key, label in (("queue_wait", "queue"), ("ttft", "TTFT"), ("e2e", "e2e"))
            )
            + "  (p50/p95/p99 ms)",
        )
    )
    rate = status["throughput"]
    engine_rate = rate["engine_generation_tokens_per_s"]
    rows.append(
        (
            "throughput",
            f"{rate['requests_per_s']:.1f} req/s  {rate['output_tokens_per_s']:.0f} tok/s out"
            + (f"  engine {engine_rate:.0f} tok/s" if engine_rate is not None else ""),
        )
    )
    counts = status["counts"]
    rejections = ", ".join(f"{k} {v}" for k, v in sorted(counts["rejections"].items()))
    cancelled = sum(counts["cancellations"].values())
    rows.append(
        (
            "counts",
            f"requests {counts['requests']}  rejected {sum(counts['rejections'].values())}"
            + (f" ({rejections})" if rejections else "")
            + f"  cancelled {cancelled}  timeouts {counts['timeouts']}"
            f"  errors {counts['errors']}",
        )
    )
    return rows


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


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
