"""The strict TOML binder: a TOML table in, a frozen dataclass out, or a ConfigError naming the key.

A leaf module (it imports only the error tree), so the config and the files it names (the tenants
file) bind their tables the same way without importing each other. Values that may be secrets (a
field marked `metadata={"secret": True}`, or a whole table bound with `secret=True`) are never
echoed in an error: the error names the key, and `at_line` adds the line of the file.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from llmd.errors import ConfigError

HIDDEN = "(its value is not shown: it may be a secret)"


def bind_table(cls: type[Any], raw: object, prefix: str = "", *, secret: bool = False) -> Any:
    """Build frozen dataclass `cls` from TOML table `raw`, checking every key and type strictly:
    unknown keys, wrong types and negative numbers raise ConfigError (with its `key`) naming
    `prefix` + key, the value (unless `secret`, or the field is marked secret) and what was
    expected. Keys left out keep the dataclass defaults; a nested table starts from its
    parent's default for that field. A field typed `dict[str, SomeDataclass]` takes named
    tables (`[engines.NAME]`), each bound the same way. A field named `source` is never listed
    as a key."""
    if not isinstance(raw, dict):
        key = prefix.rstrip(".") or "config"
        got = HIDDEN if secret else f"got {raw!r}"
        raise ConfigError(f"{key}: expected a table, {got}", key=key)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = f" in [{prefix.rstrip('.')}]" if prefix else ""
        shown = "" if secret else f" = {raw[unknown[0]]!r}"
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]}{shown}; "
            f"known keys{where}: {', '.join(sorted(set(fields) - {'source'}))}",
            key=prefix + unknown[0],
        )
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
        if value < 0:
            raise _invalid(key, value, secret, "expected a number >= 0")
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise _invalid(key, value, secret, "expected a whole number >= 0")
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
