"""The strict TOML binder: a TOML table in, a frozen dataclass out, or a ConfigError naming the key.

- A leaf module (it imports only the error tree), so the config and the files it names (the
  tenants file) bind their tables the same way without importing each other.
- Values that may be secrets (a field marked `metadata={"secret": True}`, or a whole table bound
  with `secret=True`) are never echoed in an error: the error names the key, and `at_line` adds
  the line of the file. No error echoes the value of a key the binder does not know (a
  mistyped `env` may hold one).
- Numbers are finite; a duration (a key ending in `_s` or `_ms`) is at most `MAX_DURATION_S`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from llmd.errors import ConfigError
from llmd.textfiles import not_utf8

HIDDEN = "(its value is not shown: it may be a secret)"
# The longest duration a key may give: 30 days. Past it a timer overflows (1e308 s) or is a typo;
# every duration llmd has is minutes or hours.
MAX_DURATION_S = 30 * 24 * 3600


def read_toml(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """The text of TOML file `path` and its parsed table. Raises ConfigError naming the file
    (`what` it is, e.g. "config") when it cannot be read, is not UTF-8 (TOML's encoding: the
    line and offset of the first bad byte) or is not valid TOML."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, why = not_utf8(data, exc)
        raise ConfigError(
            f"{path}:{line}: cannot read {what}: {why}; TOML files are UTF-8", line=line
        ) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type[Any]) -> dict[str, Any]:
    """`cls`'s field types, evaluated once per class: `typing.get_type_hints` compiles and
    evaluates every annotation string again on each call (`from __future__ import annotations`),
    two thirds of a config load's CPU (etc/sim.toml: 2.6 ms, 0.9 with them kept; 2026-12-07)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def bind_table(cls: type[Any], raw: object, prefix: str = "", *, secret: bool = False) -> Any:
    """Build frozen dataclass `cls` from TOML table `raw`, checking every key and type strictly:
    unknown keys, wrong types, negative numbers, NaN and infinity, and durations past
    MAX_DURATION_S raise ConfigError (with its `key`) naming `prefix` + key, the value (unless
    `secret`, or the field is marked secret; never for an unknown key) and what was expected.
    Keys left out keep the dataclass defaults; a nested table starts from its parent's default
    for that field. A field typed `dict[str, SomeDataclass]` takes named tables
    (`[engines.NAME]`), each bound the same way. A field named `source` is never listed as a
    key."""
    if not isinstance(raw, dict):
        key = prefix.rstrip(".") or "config"
        got = HIDDEN if secret else f"got {raw!r}"
        raise ConfigError(f"{key}: expected a table, {got}", key=key)
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise _unknown(prefix, unknown[0], sorted(set(fields) - {"source"}))
    values = {
        name: _convert(
            hints[name],
            value,
            f"{prefix}{name}",
            secret or fields[name].metadata.get("secret", False),
        )
        for name, value in raw.items()
    }
    defaults = cls()
    for name, value in values.items():
        # A nested table starts from its parent's default (e.g. each class of admission has
        # its own queue defaults), not from the nested class's own.
        if dataclasses.is_dataclass(value) and isinstance(raw[name], dict):
            given = {k: getattr(value, k) for k in raw[name]}
            values[name] = dataclasses.replace(getattr(defaults, name), **given)
    return dataclasses.replace(defaults, **values)


def _unknown(prefix: str, name: str, known: list[str]) -> ConfigError:
    """The error for key `name` that table `prefix` does not have: the key, the close known key
    when there is one (difflib's ratio >= 0.6), the known keys; never its value (a mistyped
    `env` or `args` may hold a secret)."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    where = f" in [{prefix.rstrip('.')}]" if prefix else ""
    return ConfigError(
        f"unknown key {prefix}{name}{hint}; known keys{where}: {', '.join(known)}",
        key=prefix + name,
    )


def at_line(error: ConfigError, text: str, source: str) -> ConfigError:
    """`error` prefixed with `source` and its line (`file:LINE: message`): the error's own, else
    the line of its key in TOML `text` when found."""
    line = error.line or (key_line(text, error.key) if error.key else None)
    where = f"{source}:{line}" if line else source
    return ConfigError(f"{where}: {error}", key=error.key)


def key_line(text: str, key: str) -> int | None:
    """The line number (from 1) where dotted `key` is set in TOML `text`: `name = ...` under
    its `[table]` header, or the header of a table key. None when not found (dotted or inline
    keys, quoting the scan does not follow)."""
    table, _, name = key.rpartition(".")
    current = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[]").replace('"', "").replace("'", "").strip()
            if current == key:
                return number
        elif current == table and stripped.partition("=")[0].strip().strip("\"'") == name:
            return number
    return None


def _invalid(key: str, value: object, secret: bool, expected: str) -> ConfigError:
    """The error for `key` set to `value`, which is not `expected` (the value not shown if
    `secret`)."""
    if secret:
        return ConfigError(f"{key}: {expected} {HIDDEN}", key=key)
    return ConfigError(f"{key} = {value!r}: {expected}", key=key)


def _check_duration(key: str, value: float, secret: bool) -> None:
    """A duration key (`*_s` in seconds, `*_ms` in milliseconds) is at most MAX_DURATION_S."""
    unit = 1000 if key.endswith("_ms") else 1 if key.endswith("_s") else 0
    if unit and value > MAX_DURATION_S * unit:
        raise _invalid(key, value, secret, f"expected at most {MAX_DURATION_S * unit} (30 days)")


def _convert(hint: Any, value: object, key: str, secret: bool) -> object:
    """Check `value` against the annotation `hint`; ints are accepted where floats are."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return bind_table(hint, value, prefix=key + ".", secret=secret)
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value in choices:
            return value
        raise _invalid(key, value, secret, f"expected one of {', '.join(map(repr, choices))}")
    if origin is tuple:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise _invalid(key, value, secret, "expected a list of strings")
    if origin is dict:
        item = typing.get_args(hint)[1]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            if not isinstance(value, dict):
                raise _invalid(key, value, secret, f"expected tables [{key}.NAME]")
            return {
                name: bind_table(item, raw, f"{key}.{name}.", secret=secret)
                for name, raw in value.items()
            }
        if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            return dict(value)
        raise _invalid(key, value, secret, "expected a table of strings")
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise _invalid(key, value, secret, "expected a number >= 0 (not nan or inf)")
        _check_duration(key, value, secret)
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise _invalid(key, value, secret, "expected a whole number >= 0")
        _check_duration(key, value, secret)
        return value
    if (hint is str and isinstance(value, str)) or (hint is bool and isinstance(value, bool)):
        return value
    expected = {
        float: "a number",
        int: "a whole number",
        str: "a string",
        bool: "true or false",
    }.get(hint, str(hint))
    raise _invalid(key, value, secret, f"expected {expected}")
