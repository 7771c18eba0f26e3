"""The tenants file as `llmd tenant` edits it: a tenant added, its keys replaced or revoked, with
the file's comments, order and layout kept (tomlkit round-trips TOML), the result checked as
llmd reads it (llmd/admission/tenants.py), then written whole or not at all, one writer at a
time. Keys are made here and only their SHA-256 digests are written."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from llmd.admission.classes import Priority
from llmd.admission.tenants import (
    TENANT_NAME,
    TENANT_NAME_RULE,
    TenantDirectory,
    hash_key,
    parse_tenants,
)
from llmd.errors import ConfigError, TenantError
from llmd.releases.atomic import locked, write_atomic

# What `--budget KEY=VALUE` may set: the tenants file's keys of shares and budgets.
LIMITS: Mapping[str, type] = {
    "input_tokens_per_minute": int,
    "output_tokens_per_minute": int,
    "tokens_per_day": int,
    "max_kv_tokens": int,
    "max_kv_share": float,
}
NEW_FILE_MODE = 0o640  # keys' digests: readable by the llmd group, not by everyone
HEADER = 'llmd tenants: [tenants.NAME] tables (README, "Tenants, classes and rejections")'


def new_key() -> str:
    """A new random API key: `llmd-` and 256 bits in URL-safe base64."""
    return "llmd-" + secrets.token_urlsafe(32)


class TenantsFile:
    """The tenants file at `path` (a missing one starts empty), read now. Edit with `add`,
    `rotate` and `revoke`, then `save`; `edit(path)` holds the writers' lock meanwhile."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read tenants file: {exc}") from exc
        try:
            self.doc = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        if not text:
            self.doc.add(tomlkit.comment(HEADER))

    @classmethod
    @contextlib.contextmanager
    def edit(cls, path: Path) -> Iterator[TenantsFile]:
        """The file at `path`, read and edited under the writers' lock (`.NAME.lock` beside
        it), so two `llmd tenant` verbs at once never lose each other's edit."""
        try:
            with locked(path.parent / f".{path.name}.lock"):
                yield cls(path)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot edit the tenants file: {exc}") from exc

    def _tenants(self) -> Table:
        tenants = self.doc.get("tenants")
        if tenants is None:
            tenants = self.doc["tenants"] = tomlkit.table(is_super_table=True)
        if not isinstance(tenants, Table):
            raise ConfigError(f"{self.path}: `tenants` is not a table of [tenants.NAME] tables")
        return tenants

    def _tenant(self, name: str) -> Table:
        table = self._tenants().get(name)
        if not isinstance(table, Table):
            raise TenantError(f"no tenant {name} in {self.path}")
        return table

    def names(self) -> list[str]:
        """The tenants' names, in the file's order."""
        return list(self._tenants())

    def add(self, name: str, cls: str | None, limits: Mapping[str, Any]) -> str:
        """Add tenant `name` with a new key (returned; only its digest is written), its class
        (highest and default; None: the defaults) and `limits` (keys of LIMITS). Raises
        TenantError for a name taken or not allowed, or a bad class or limit."""
        if not TENANT_NAME.fullmatch(name):
            raise TenantError(f"{name!a} is not a tenant name: {TENANT_NAME_RULE}")
        if name in self._tenants():
            raise TenantError(
                f"tenant {name} is already in {self.path}; `llmd tenant key {name} --rotate` "
                "gives it a new key"
            )
        key = new_key()
        table = tomlkit.table()
        table["keys"] = [hash_key(key)]
        if cls is not None:
            try:
                Priority.parse(cls)
            except ValueError:
                raise TenantError(f"--class {cls}: expected interactive, normal or batch") from None
            table["highest_class"] = table["default_class"] = cls
        for limit, value in limits.items():
            table[limit] = value
        self._tenants()[name] = table
        return key

    def rotate(self, name: str) -> str:
        """Replace every key of tenant `name` with a new one (returned). Raises TenantError."""
        key = new_key()
        self._tenant(name)["keys"] = [hash_key(key)]
        return key

    def revoke(self, name: str) -> int:
        """Remove every key of tenant `name` (its table, limits and usage stay); how many it
        had. Raises TenantError."""
        table = self._tenant(name)
        had = len(table.get("keys", []))
        table["keys"] = []
        return had

    def check(self) -> TenantDirectory:
        """The tenants as llmd will read the edited file. Raises ConfigError."""
        return parse_tenants(tomlkit.dumps(self.doc), self.path)

    def save(self) -> None:
        """Check the edit (ConfigError: nothing written), then write it whole or not at all,
        keeping the file's mode (a new one: 0640). Raises ConfigError."""
        self.check()
        try:
            mode = self.path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = NEW_FILE_MODE
        try:
            write_atomic(self.path, tomlkit.dumps(self.doc).encode(), mode)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write the tenants file: {exc}") from exc


def limit_value(text: str) -> tuple[str, int | float]:
    """`KEY=VALUE` of `--budget` as (key, value). Raises TenantError naming what is wrong."""
    key, sep, value = text.partition("=")
    kind = LIMITS.get(key.strip())
    if not sep or kind is None:
        raise TenantError(f"--budget {text}: expected KEY=VALUE, KEY one of {', '.join(LIMITS)}")
    try:
        number = kind(value.strip().replace("_", ""))
    except ValueError:
        raise TenantError(f"--budget {text}: expected a {kind.__name__} value") from None
    if not 0 <= number <= (1 if kind is float else 10**15):
        bound = "a share in [0, 1]" if kind is float else "a whole number >= 0"
        raise TenantError(f"--budget {text}: expected {bound}")
    return key.strip(), number
