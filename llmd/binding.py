"""The strict TOML binder: a TOML table in, a frozen dataclass out, or a ConfigError naming the key.

A leaf module (it imports only the error tree), so the config and the files it names (the tenants
file) bind their tables the same way without importing each other.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from llmd.errors import ConfigError


def bind_table(cls: type[Any], raw: object, prefix: str = "") -> Any:
    """Build frozen dataclass `cls` from TOML table `raw`, checking every key and type strictly:
    unknown keys, wrong types and negative numbers raise ConfigError naming `prefix` + key, the
    value and what was expected. Keys left out keep the dataclass defaults; a nested table starts
    from its parent's default for that field. A field named `source` is never listed as a key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a table, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ConfigError(
            f"unknown key {prefix}{unknown[0]} = {raw[unknown[0]]!r}; "
            f"known keys{' in [' + prefix.rstrip('.') + ']' if prefix else ''}: "
            f"{', '.join(sorted(fields - {'source'}))}"
        )
    values = {name: _convert(hints[name], value, f"{prefix}{name}") for name, value in raw.items()}
    defaults = cls()
    for name, value in values.items():
        # A nested table starts from its parent's default (e.g. each class of admission has
        # its own queue defaults), not from the nested class's own.
        if dataclasses.is_dataclass(value) and isinstance(raw[name], dict):
            given = {k: getattr(value, k) for k in raw[name]}
            values[name] = dataclasses.replace(getattr(defaults, name), **given)
    return dataclasses.replace(defaults, **values)


def _convert(hint: Any, value: object, key: str) -> object:
    """Check `value` against the annotation `hint`; ints are accepted where floats are."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return bind_table(hint, value, prefix=key + ".")
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value in choices:
            return value
        raise ConfigError(f"{key} = {value!r}: expected one of {', '.join(map(repr, choices))}")
    if origin is tuple:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{key} = {value!r}: expected a list of strings")
    if origin is dict:
        if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            return dict(value)
        raise ConfigError(f"{key} = {value!r}: expected a table of strings")
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{key} = {value!r}: expected a number >= 0")
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{key} = {value!r}: expected a whole number >= 0")
        return value
    if hint is str and isinstance(value, str):
        return value
    expected = {float: "a number", int: "a whole number", str: "a string"}.get(hint, str(hint))
    raise ConfigError(f"{key} = {value!r}: expected {expected}")
