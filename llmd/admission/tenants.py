"""Tenants: who sends a request, found from its API key, with that tenant's limits.

Keys are stored as SHA-256 hex digests in a TOML file named by `admission.tenants_file`:

    [tenants.alice]
    keys = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
    max_concurrency = 8      # requests in the engine at once (0 = no limit)
    max_queued = 32          # requests waiting in llmd at once (0 = no limit)
    highest_class = "interactive"
    default_class = "normal"
    weight = 1.0             # share of tokens against other tenants in the same class
    metrics = false          # whether its keys may read GET /metrics
    max_kv_tokens = 0        # KV tokens its running requests may hold on a pool (0 = no limit)
    max_kv_share = 0.0       # the same as a fraction of the pool's KV capacity (0 = no limit)
    input_tokens_per_minute = 0   # token budgets that refill (0 = none):
    output_tokens_per_minute = 0  # llmd/admission/budgets.py
    tokens_per_day = 0

`llmd hash-key` prints the digest of a key read from stdin, `llmd tenant add` writes a tenant
with a new key. A key itself is never stored or logged. With no file, every request belongs to
one anonymous tenant without limits; with one, every request needs a key of a tenant in it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

from llmd.admission.classes import Priority
from llmd.binding import HIDDEN, at_line, bind_table, read_toml
from llmd.config import ANONYMOUS, AdmissionConfig
from llmd.errors import ConfigError, InvalidApiKey

_HEX = frozenset("0123456789abcdef")
# A tenant's name: a label on metrics and in logs, a bare TOML key, shown by llmd-top and
# `llmd tenant list`. The one rule, for `llmd tenant add` and for the tenants file.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
TENANT_NAME_RULE = "letters, digits, '-' and '_', at most 64, starting with a letter or digit"
# The anthropic SDK's header for an API key (`api_key`); OpenAI's clients send a bearer token.
API_KEY_HEADER = b"x-api-key"


def hash_key(key: str) -> str:
    """The stored form of an API key: SHA-256 of its UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Tenant:
    """One tenant: limits on its requests (0 = no limit), its classes, its weight, whether its
    keys may read `/metrics` (which names every tenant and its traffic), its share of each
    pool's KV cache (llmd/admission/shares.py) and its token budgets
    (llmd/admission/budgets.py)."""

    name: str = ANONYMOUS
    max_concurrency: int = 0
    max_queued: int = 0
    highest_class: Priority = Priority.INTERACTIVE
    default_class: Priority = Priority.NORMAL
    weight: float = 1.0
    metrics: bool = False
    max_kv_tokens: int = 0  # KV tokens its running requests may hold on one pool
    max_kv_share: float = 0.0  # of the pool's measured KV capacity, in (0, 1]
    input_tokens_per_minute: int = 0  # prompt tokens, by validation's exact count
    output_tokens_per_minute: int = 0  # output tokens, max_tokens until the request ends
    tokens_per_day: int = 0  # both

    @property
    def budgeted(self) -> bool:
        """Whether it has a token budget."""
        return bool(
            self.input_tokens_per_minute or self.output_tokens_per_minute or self.tokens_per_day
        )


@dataclasses.dataclass(frozen=True)
class _TenantSpec:
    """A tenant's table in the tenants file, as written (classes by name)."""

    keys: tuple[str, ...] = ()
    max_concurrency: int = 0
    max_queued: int = 0
    highest_class: str = "interactive"
    default_class: str = "normal"
    weight: float = 1.0
    metrics: bool = False
    max_kv_tokens: int = 0
    max_kv_share: float = 0.0
    input_tokens_per_minute: int = 0
    output_tokens_per_minute: int = 0
    tokens_per_day: int = 0


class TenantDirectory:
    """Maps API keys to tenants. `path` is the tenants file it was read from (None: no file:
    every request is the anonymous tenant); with a file, keys are required even when it holds
    none (its every tenant revoked), and `every` lists its tenants, keys or not."""

    def __init__(
        self,
        by_digest: dict[str, Tenant] | None = None,
        path: Path | None = None,
        every: list[Tenant] | None = None,
    ) -> None:
        self._by_digest = by_digest or {}
        self._anonymous = Tenant()
        self.path = path
        self._every = (
            every
            if every is not None
            else list({t.name: t for t in self._by_digest.values()}.values())
        )

    @property
    def keys_required(self) -> bool:
        return self.path is not None or bool(self._by_digest)

    def tenants(self) -> list[Tenant]:
        """Every tenant, in the file's order (the anonymous one when there is none)."""
        return list(self._every) or ([] if self.keys_required else [self._anonymous])

    def authenticate(self, headers: list[Any]) -> Tenant:
        """The tenant of a request with ASGI `headers`: its key in `Authorization: Bearer KEY`
        (OpenAI's clients, the anthropic SDK's `auth_token`) or `x-api-key: KEY` (the anthropic
        SDK's `api_key`); when both are sent, the bearer key counts.

        Raises InvalidApiKey (401) when keys are configured and the key is missing or unknown.
        """
        if not self.keys_required:
            return self._anonymous
        value = next((v for k, v in headers if k == b"authorization"), b"")
        scheme, _, key = value.decode("latin-1").partition(" ")
        if not value:
            value = next((v for k, v in headers if k == API_KEY_HEADER), b"")
            scheme, key = "bearer", value.decode("latin-1")
        tenant = self._by_digest.get(hash_key(key.strip())) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise InvalidApiKey(
                "missing or unknown API key: send Authorization: Bearer KEY (or x-api-key: KEY)"
                if value
                else "this llmd requires an API key: send Authorization: Bearer KEY (or "
                "x-api-key: KEY)"
            )
        return tenant


def load_tenants(path: Path | None) -> TenantDirectory:
    """Read the tenants file at `path` (None: anonymous only). Raises ConfigError naming the
    file, line and key for unreadable files (or not UTF-8), unknown keys, bad digests, classes
    or limits. No value of the file is echoed: a key pasted in place of its digest stays
    secret."""
    if path is None:
        return TenantDirectory()
    text, raw = read_toml(path, "tenants file")
    return _directory(raw, text, path)


def parse_tenants(text: str, path: Path) -> TenantDirectory:
    """The tenants of `text`, the new content of the tenants file at `path` (`llmd tenant`
    checks an edit before it writes it). Raises ConfigError as `load_tenants` does."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return _directory(raw, text, path)


def _directory(raw: dict[str, Any], text: str, path: Path) -> TenantDirectory:
    try:
        every, by_digest = _bind_tenants(raw, text)
        return TenantDirectory(by_digest, path, every)
    except ConfigError as exc:
        raise at_line(exc, text, str(path)) from None


def configured_tenants(admission: AdmissionConfig) -> TenantDirectory:
    """The tenants of `admission.tenants_file` ("" : anonymous only), read now: at start-up,
    by `llmd check-config`, and on each reload before anything changes. Raises ConfigError as
    `load_tenants` does."""
    return load_tenants(Path(admission.tenants_file) if admission.tenants_file else None)


def _bind_tenants(raw: dict[str, Any], text: str) -> tuple[list[Tenant], dict[str, Tenant]]:
    """Every tenant of the parsed file, and the tenants by key digest. Raises ConfigError
    (with its key)."""
    extra = sorted(set(raw) - {"tenants"})
    if extra or not isinstance(raw.get("tenants"), dict):
        raise ConfigError(
            f"expected only [tenants.NAME] tables, got {', '.join(extra) or 'none'}",
            key=extra[0] if extra else None,
        )
    by_digest: dict[str, Tenant] = {}
    every: list[Tenant] = []
    for name, table in raw["tenants"].items():
        if not TENANT_NAME.fullmatch(name):
            raise ConfigError(f"[tenants.{name!a}]: not a tenant name ({TENANT_NAME_RULE})")
        prefix = f"tenants.{name}."
        spec: _TenantSpec = bind_table(_TenantSpec, table, prefix, secret=True)
        tenant = _tenant(name, spec, prefix)
        every.append(tenant)
        for index, digest in enumerate(spec.keys):
            where = f"{prefix}keys[{index}]"
            if len(digest) != 64 or not set(digest) <= _HEX:
                raise ConfigError(
                    f"{where} is not a SHA-256 hex digest (64 hex digits): put the digest of a "
                    "key there, never the key itself (make one with `llmd hash-key`); the "
                    "value is not shown",
                    key=prefix + "keys",
                    line=_line_of(text, digest),
                )
            if digest in by_digest:
                raise ConfigError(
                    f"{where}: this key is also given to {by_digest[digest].name}",
                    key=prefix + "keys",
                )
            by_digest[digest] = tenant
    return every, by_digest


def _line_of(text: str, value: str) -> int | None:
    """The line number (from 1) of the first place `value` appears in `text`, if it does."""
    at = text.find(value) if value else -1
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def _tenant(name: str, spec: _TenantSpec, prefix: str) -> Tenant:
    classes = {}
    for key in ("highest_class", "default_class"):
        value = getattr(spec, key)
        try:
            classes[key] = Priority.parse(value)
        except ValueError:
            raise ConfigError(
                f"{prefix}{key}: expected 'interactive', 'normal' or 'batch' {HIDDEN}",
                key=prefix + key,
            ) from None
    if spec.weight <= 0:
        raise ConfigError(f"{prefix}weight: expected a number > 0 {HIDDEN}", key=prefix + "weight")
    if spec.max_kv_share > 1:
        raise ConfigError(
            f"{prefix}max_kv_share: expected a fraction in [0, 1] {HIDDEN}",
            key=prefix + "max_kv_share",
        )
    return Tenant(
        name=name,
        max_concurrency=spec.max_concurrency,
        max_queued=spec.max_queued,
        highest_class=classes["highest_class"],
        default_class=max(classes["default_class"], classes["highest_class"]),
        weight=spec.weight,
        metrics=spec.metrics,
        max_kv_tokens=spec.max_kv_tokens,
        max_kv_share=spec.max_kv_share,
        input_tokens_per_minute=spec.input_tokens_per_minute,
        output_tokens_per_minute=spec.output_tokens_per_minute,
        tokens_per_day=spec.tokens_per_day,
    )
