"""`llmd release create|list|show|diff|history|gc`: the release verbs that work without the
daemon (they read llmd's config and the state directory)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from llmd import exitcodes
from llmd.arguments import count
from llmd.config import Config, EngineConfig, config_path, load_config
from llmd.engine.args import engine_flag
from llmd.errors import ConfigError, ReleaseError
from llmd.releases import display
from llmd.releases.diff import diff_releases
from llmd.releases.gc import DEFAULT_KEEP, run_gc
from llmd.releases.store import DEFAULT_STATE_DIR, ReleaseStore, create_release

# sysexits.h EX_CONFIG, as llmd/cli.py.


def add_parser(verbs: Any) -> None:
    """Add `release` and its verbs to the `llmd` subparsers `verbs`."""
    release = verbs.add_parser(
        "release",
        help="create, list, show, compare and clean up release records (no daemon needed)",
        description="A release pins what an engine serves: its engine table, the digests of its "
        "weights, tokenizer, chat template and generation config, and the vLLM, torch, CUDA and "
        "driver versions. Records live in STATE_DIR/releases and never change once written.",
    )
    sub = release.add_subparsers(dest="release_verb", required=True)
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        help=f"llmd's state directory (default {DEFAULT_STATE_DIR})",
    )
    create = sub.add_parser("create", parents=[state], help="record the configured engine")
    create.add_argument("name", help="the release's name (letters, digits, . _ -)")
    create.add_argument(
        "--from-config", metavar="PATH", help="config file (default $LLMD_CONFIG, /etc/llmd/...)"
    )
    create.add_argument("--engine", default="main", help="which engine of the config (main)")
    create.set_defaults(func=run, release_func=_create)
    listing = sub.add_parser("list", parents=[state], help="the releases, oldest first")
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    listing.set_defaults(func=run, release_func=_list)
    show = sub.add_parser("show", parents=[state], help="one release's record")
    show.add_argument("name", help="the release to show")
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    show.set_defaults(func=run, release_func=_show)
    diff = sub.add_parser("diff", parents=[state], help="what changed from release A to B")
    diff.add_argument("a", help="the release compared from")
    diff.add_argument("b", help="the release compared to")
    diff.add_argument("--json", action="store_true", help="print the changes as JSON")
    diff.set_defaults(func=run, release_func=_diff)
    history = sub.add_parser("history", parents=[state], help="the deploy events, oldest first")
    history.add_argument("--engine", help="only this engine's deploys")
    history.add_argument("--json", action="store_true", help="print the JSON lines as written")
    history.set_defaults(func=run, release_func=_history)
    gc = sub.add_parser(
        "gc",
        parents=[state],
        help="remove old records; never the current or previous release of an engine",
    )
    gc.add_argument(
        "--keep",
        type=count,
        default=DEFAULT_KEEP,
        help=f"newest records kept per engine ({DEFAULT_KEEP})",
    )
    gc.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    gc.add_argument(
        "--models",
        action="store_true",
        help="also remove model directories under STATE_DIR/models that only removed records name",
    )
    gc.add_argument(
        "--config",
        help="with --models: the config whose engines' models are kept (default as serve)",
    )
    gc.set_defaults(func=run, release_func=_gc)


def run(args: argparse.Namespace) -> int:
    """Run a release verb; its exit status (1 on a release error, 78 on a config error)."""
    try:
        code: int = args.release_func(args)
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return exitcodes.CONFIG
    except ReleaseError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    return code


def configured_engines(config: Config) -> dict[str, EngineConfig]:
    """The engines of a config by name: `[engines.NAME]`, or `[engine]` alone as `main`."""
    return config.engine_tables


def _store(args: argparse.Namespace) -> ReleaseStore:
    return ReleaseStore(Path(args.state_dir))


def _create(args: argparse.Namespace) -> int:
    path = config_path(args.from_config)
    engines = configured_engines(load_config(path))
    if args.engine not in engines:
        raise ReleaseError(
            f"{path} has no engine {args.engine!r} (engines: {', '.join(sorted(engines))})"
        )
    try:
        import pynvml as nvml
    except ImportError:
        nvml = None
    release, cache = create_release(
        _store(args), args.name, args.engine, engines[args.engine], nvml
    )
    print(
        f"release {release.name} created in {_store(args).path(release.name)}: engine "
        f"{release.engine}, model {release.table.model}; read {cache.files_hashed} files "
        f"({cache.bytes_hashed / 2**20:.1f} MiB), the rest from the digest cache"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    releases, problems = _store(args).releases()
    for problem in problems:
        print(f"llmd: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in releases], indent=2))
    elif releases:
        print(display.release_table(releases))
    else:
        print(f"no releases in {_store(args).root}")
    return 1 if problems else 0


def _show(args: argparse.Namespace) -> int:
    release = _store(args).get(args.name)
    print(json.dumps(release.to_dict(), indent=2) if args.json else display.release_text(release))
    return 0


def _diff(args: argparse.Namespace) -> int:
    store = _store(args)
    changes = diff_releases(store.get(args.a), store.get(args.b))
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in changes], indent=2))
    else:
        print("\n".join(c.line() for c in changes))
    return 0


def _history(args: argparse.Namespace) -> int:
    events, problems = _store(args).history()
    for problem in problems:
        print(f"llmd: {problem}", file=sys.stderr)
    events = [e for e in events if args.engine in (None, e.get("engine"))]
    for event in events:
        print(json.dumps(event, sort_keys=True) if args.json else display.history_line(event))
    if not events and not args.json:
        print("no deploys yet")
    return 0


def _gc(args: argparse.Namespace) -> int:
    configured: list[str] = []
    if args.models:
        config = load_config(config_path(args.config))
        configured = [config.validation.tokenizer_path] if config.validation.tokenizer_path else []
        for engine in configured_engines(config).values():
            configured.append(engine.model)
            configured += filter(None, [engine_flag(engine.args, "--tokenizer")])
    try:
        report = run_gc(
            _store(args),
            args.keep,
            dry_run=args.dry_run,
            models=args.models,
            configured_models=configured,
        )
    except OSError as exc:
        raise ReleaseError(f"gc failed: {exc}") from exc
    print(display.gc_text(report))
    return 0
