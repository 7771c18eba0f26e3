"""`llmd tenant add|key|revoke|list`: API keys managed without editing the tenants file by hand.

Each edit is checked and written whole (llmd/admin/tenants_file.py), then the daemon is asked to
read the tenants file again (`POST /tenants/reload` on its admin socket), so a revoked key is
refused from its next request. A new key is printed once, alone on stdout (`KEY=$(llmd tenant
add NAME)`); only its digest is kept. What happened goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmd.config import config_path, load_config
from llmd.errors import ConfigError, TenantError
from llmd.runtime import RuntimePaths

if TYPE_CHECKING:  # imported when a verb runs: `llmd`'s other verbs start without them
    from llmd.admin.tenants_file import TenantsFile
    from llmd.admission.tenants import Tenant

EXIT_FAILED = 1
EXIT_CONFIG = 78  # sysexits.h EX_CONFIG, as `llmd check-config`


def add_parser(verbs: Any) -> None:
    """Register `llmd tenant` and its actions on the `llmd` parser's subcommands."""
    tenant = verbs.add_parser(
        "tenant",
        help="add a tenant with a new API key, rotate or revoke its keys, list the tenants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = tenant.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a tenant; print its new key (once)")
    add.add_argument("name", help="the tenant's name (letters, digits, - and _)")
    add.add_argument(
        "--class",
        dest="cls",
        choices=("interactive", "normal", "batch"),
        help="its class: the highest it may ask for and its default (default: the file's "
        "defaults, interactive and normal)",
    )
    add.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a share or budget of the tenants file as KEY=VALUE (input_tokens_per_minute, "
        "output_tokens_per_minute, tokens_per_day, max_kv_tokens, max_kv_share); repeat for "
        "each",
    )
    key = actions.add_parser("key", help="replace a tenant's keys with a new one (printed once)")
    key.add_argument("name", help="the tenant")
    key.add_argument("--rotate", action="store_true", required=True, help="make the new key")
    revoke = actions.add_parser("revoke", help="remove every key of a tenant (refused at once)")
    revoke.add_argument("name", help="the tenant")
    listing = actions.add_parser("list", help="the tenants, their keys and limits")
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    for sub in (add, key, revoke, listing):
        sub.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
        sub.add_argument(
            "--runtime-dir",
            metavar="DIR",
            help="the daemon's runtime directory, where its admin socket is (default: the "
            "config's server.runtime_dir)",
        )
        sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One `llmd tenant` action; its exit status."""
    from llmd.admin.tenants_file import TenantsFile

    try:
        config = load_config(config_path(args.config))
        if not config.admission.tenants_file:
            raise ConfigError(
                f"{config.source}: admission.tenants_file is not set: name a file there (e.g. "
                'tenants_file = "tenants.toml"), add a tenant (`llmd tenant add NAME`: it '
                "writes the file), then `llmd reload`"
            )
        path = Path(config.admission.tenants_file)
        if args.action == "list":
            return _list(TenantsFile(path), args.json)
        with TenantsFile.edit(path) as tenants:
            printed = _edit(tenants, args)
            tenants.save()
    except ConfigError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except TenantError as exc:
        print(f"llmd: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if printed is not None:
        print(printed)
    return _reload(Path(args.runtime_dir or config.server.runtime_dir), path)


def _edit(tenants: TenantsFile, args: argparse.Namespace) -> str | None:
    """Apply the action to `tenants`: the new key to print, if any. Raises TenantError."""
    from llmd.admin.tenants_file import limit_value

    name = args.name
    if args.action == "add":
        limits = dict(limit_value(text) for text in args.budget)
        key = tenants.add(name, args.cls, limits)
        _say(f"tenant {name} added to {tenants.path}; its API key follows, shown once")
        return key
    if args.action == "key":
        key = tenants.rotate(name)
        _say(f"tenant {name} has a new key (its old ones are revoked); it follows, shown once")
        return key
    had = tenants.revoke(name)
    _say(f"tenant {name}: {had} key{'s' if had != 1 else ''} revoked")
    return None


def _reload(runtime_dir: Path, edited: Path) -> int:
    """Ask the daemon to read its tenants file again; a daemon not running is no failure (it
    reads the file when it starts), one that reads another file than `edited` (or none: its
    config does not name it yet) is: the edit does not reach it."""
    from llmd.admin.client import AdminRefused, AdminUnreachable, admin_request

    socket = RuntimePaths(runtime_dir).admin_socket
    try:
        answer = asyncio.run(admin_request(socket, "POST", "/tenants/reload"))
    except AdminUnreachable:
        _say(f"no llmd answers on {socket}: the file is written; llmd reads it when it starts")
        return 0
    except AdminRefused as exc:
        print(f"llmd: the daemon refused the tenants file: {exc}", file=sys.stderr)
        return EXIT_FAILED
    reads = answer.get("tenants_file") or ""
    if not reads or Path(reads).resolve() != edited.resolve():
        what = f"reads {reads}" if reads else "reads no tenants file"
        print(
            f"llmd: the llmd on {socket} {what}, not {edited}: the file is written, but that "
            "llmd does not use it (`llmd reload` once its config names this file)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    _say(f"llmd reloaded its tenants ({len(answer['tenants'])}): from its next request")
    return 0


def _list(tenants: TenantsFile, as_json: bool) -> int:
    """Print each tenant: its keys, classes and limits (0 and none: no limit)."""
    found = tenants.check().tenants() if tenants.names() else []
    doc_tenants = tenants.doc.get("tenants", {})
    rows = [
        {
            **dataclasses.asdict(tenant),
            "highest_class": tenant.highest_class.label,
            "default_class": tenant.default_class.label,
            "keys": len(doc_tenants[tenant.name].get("keys", [])),
        }
        for tenant in found
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'tenant':<16} {'keys':>4}  {'classes':<22} limits")
    for tenant, row in zip(found, rows, strict=True):
        classes = f"{row['highest_class']}/{row['default_class']}"
        print(f"{tenant.name:<16} {row['keys']:>4}  {classes:<22} {_limits(tenant) or '-'}")
    return 0


def _limits(tenant: Tenant) -> str:
    """The tenant's limits that are set, as `key=value` pairs."""
    from llmd.admin.tenants_file import LIMITS

    shown = ("max_concurrency", "max_queued", *LIMITS)
    return " ".join(f"{key}={getattr(tenant, key):g}" for key in shown if getattr(tenant, key))


def _say(message: str) -> None:
    print(message, file=sys.stderr)
