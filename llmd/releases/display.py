"""The human forms of releases, diffs, history lines and gc reports (`--json` prints the
records themselves)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from llmd.releases.gc import GcReport
from llmd.releases.record import Release


def release_table(releases: Sequence[Release]) -> str:
    """One line per release: name, engine, served name, model, created at and by."""
    rows = [("NAME", "ENGINE", "SERVED AS", "MODEL", "CREATED (UTC)", "BY")]
    rows += [
        (r.name, r.engine, r.table.served_model_name, r.table.model, r.created_at, r.created_by)
        for r in releases
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]])
        for row in rows
    )


def release_text(release: Release) -> str:
    """The record, section by section, digests shortened to 12 hex digits."""
    table, files, v = release.table, release.files, release.versions
    lines = [
        ("release", f"{release.name} (engine {release.engine}, schema {release.schema})"),
        ("created", f"{release.created_at} by {release.created_by}"),
        ("model", f"{table.model}  served as {table.served_model_name}  (kind {table.kind})"),
        ("python", table.python or "(llmd's own)"),
        ("command", shlex.join(table.command) or "(python -m the engine's server module)"),
        ("args", shlex.join(table.args) or "-"),
        ("env", " ".join(f"{k}={val}" for k, val in table.env.items()) or "-"),
        ("vllm", _version(v.vllm and f"{v.vllm_distribution} {v.vllm}", v.vllm_reason)),
        ("torch", _version(v.torch, None)),
        ("cuda", _version(v.cuda, v.cuda_reason)),
        ("driver", _version(v.nvidia_driver, v.nvidia_driver_reason)),
        ("llmd", v.llmd),
    ]
    if files.reason:
        lines.append(("files", files.reason))
    else:
        for role in ("weights", "tokenizer", "config", "generation_config"):
            digests: Mapping[str, str] = getattr(files, role)
            lines.append((role, "  ".join(f"{n} {d[:12]}" for n, d in digests.items()) or "-"))
        template = files.chat_template
        lines.append(
            ("template", f"{template.source} {template.sha256[:12]}" if template else "none")
        )
        missing = files.missing()
        if missing:
            lines.append(("MISSING", ", ".join(missing)))
    return "\n".join(f"{label:<18} {value}" for label, value in lines)


def history_line(event: Mapping[str, Any]) -> str:
    """`at engine old->new strategy event [step N (S%)] [verdict] [reason]`."""
    parts = [
        str(event.get("at", "?")),
        str(event.get("engine", "?")),
        f"{event.get('old', '?')}->{event.get('new', '?')}",
        str(event.get("strategy", "?")),
        str(event.get("event", "?")),
    ]
    if "step" in event:
        parts.append(f"step {event['step']} ({event.get('share', '?')}%)")
    verdict = event.get("verdict")
    if isinstance(verdict, dict):
        parts.append(f"verdict {verdict.get('decision')}: {verdict.get('reason')}")
    for key in ("release", "failed_check", "reason", "detail"):
        if event.get(key) and not (key == "reason" and isinstance(verdict, dict)):
            parts.append(f"{key}: {event[key]}")
    return "  ".join(parts)


def gc_text(report: GcReport) -> str:
    """What gc kept and removed, and why."""
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{'kept' if d.keep else verb:<12} {d.name}: {d.reason}" for d in report.decisions]
    lines += [f"{verb:<12} model directory {path}" for path in report.removed_models]
    if not report.dry_run and report.cache_entries_dropped:
        lines.append(f"dropped {report.cache_entries_dropped} cached digests")
    return "\n".join(lines) or "no releases"


def _version(value: str | None, reason: str | None) -> str:
    return value if value else f"- ({reason})" if reason else "-"
