"""`llmd release diff A B`: what changed between two releases, field by field.

Nested fields are compared key by key (`versions.vllm`, `table.env.VLLM_X`); engine args are
read as flags, so a diff names each added, removed or changed flag instead of two long lists;
file digests name the file that changed, appeared or went.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from llmd.engine.args import parse_flags
from llmd.releases.record import Release

# Fields that differ between any two releases; shown apart from what was changed.
IDENTITY = ("name", "created_at", "created_by")
_DIGEST_MAPS = ("weights", "tokenizer", "config", "generation_config")


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference at `path` (dotted): `kind` is `changed`, `added` or `removed`; `old` and
    `new` are the values (None on the side where it is absent)."""

    path: str
    kind: str
    old: Any
    new: Any

    def line(self) -> str:
        """The human form, e.g. `versions.vllm: 0.32.0 -> 0.33.0`."""
        if self.kind == "added":
            return f"{self.path}: + {_show(self.new)}"
        if self.kind == "removed":
            return f"{self.path}: - {_show(self.old)}"
        return f"{self.path}: {_show(self.old)} -> {_show(self.new)}"


def diff_releases(a: Release, b: Release) -> list[Change]:
    """Every difference from `a` to `b`, identity fields first, then in field order."""
    old, new = a.to_dict(), b.to_dict()
    changes = [
        Change(key, "changed", old[key], new[key]) for key in IDENTITY if old[key] != new[key]
    ]
    for key in old:
        if key in IDENTITY:
            continue
        if key == "table":
            changes += _table(old[key], new[key])
        elif key == "files":
            changes += _files(old[key], new[key])
        else:
            changes += _nested(key, old[key], new[key])
    return changes


def _table(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    changes = []
    for key in old:
        if key == "args":
            changes += _args(old[key], new[key])
        else:
            changes += _nested(f"table.{key}", old[key], new[key])
    return changes


def _files(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    changes = []
    for key in old:
        path = f"files.{key}"
        if key in _DIGEST_MAPS:
            for name in sorted(set(old[key]) | set(new[key])):
                if name not in new[key]:
                    changes.append(Change(f"{path}.{name}", "removed", old[key][name], None))
                elif name not in old[key]:
                    changes.append(Change(f"{path}.{name}", "added", None, new[key][name]))
                elif old[key][name] != new[key][name]:
                    changes.append(
                        Change(f"{path}.{name}", "changed", old[key][name], new[key][name])
                    )
        else:
            changes += _nested(path, old[key], new[key])
    return changes


def _args(old: Sequence[str], new: Sequence[str]) -> list[Change]:
    """Flags added, removed or given another value (a repeated flag compares as its list)."""
    before, after = _flag_map(old), _flag_map(new)
    changes = []
    for flag in [*before, *(f for f in after if f not in before)]:
        label = f"table.args {flag or '(positional)'}"
        if flag not in after:
            changes.append(Change(label, "removed", _flag_text(flag, before[flag]), None))
        elif flag not in before:
            changes.append(Change(label, "added", None, _flag_text(flag, after[flag])))
        elif before[flag] != after[flag]:
            changes.append(Change(label, "changed", _values(before[flag]), _values(after[flag])))
    if not changes and list(old) != list(new):
        changes.append(Change("table.args (order)", "changed", list(old), list(new)))
    return changes


def _flag_map(args: Sequence[str]) -> dict[str, list[str | None]]:
    flags: dict[str, list[str | None]] = {}
    for flag, value in parse_flags(args):
        flags.setdefault(flag, []).append(value)
    return flags


def _flag_text(flag: str, values: list[str | None]) -> str:
    return " ".join(f"{flag} {v}" if v is not None else flag for v in values).strip()


def _values(values: list[str | None]) -> Any:
    shown = ["(no value)" if v is None else v for v in values]
    return shown[0] if len(shown) == 1 else shown


def _nested(path: str, old: Any, new: Any) -> list[Change]:
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in [*old, *(k for k in new if k not in old)]:
            if key not in new:
                changes.append(Change(f"{path}.{key}", "removed", old[key], None))
            elif key not in old:
                changes.append(Change(f"{path}.{key}", "added", None, new[key]))
            else:
                changes += _nested(f"{path}.{key}", old[key], new[key])
        return changes
    return [] if old == new else [Change(path, "changed", old, new)]


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + "…"  # a SHA-256: its first 12 hex digits tell files apart
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) if value else "[]"
    return str(value)


def tokenizer_changes(a: Release, b: Release) -> list[str]:
    """The fields from `a` to `b` that change how prompts are counted: tokenizer files and
    the chat template's digest (not where they lie: a copy of the same files counts the
    same)."""
    return [
        change.path
        for change in diff_releases(a, b)
        if change.path.startswith("files.tokenizer.")
        or (change.path.startswith("files.chat_template") and not change.path.endswith("source"))
    ]
