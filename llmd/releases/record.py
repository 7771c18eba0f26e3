"""The release record: what one engine serves, pinned (engine table, file digests, versions,
who made it and when), and its JSON form (`schema` versioned) in the state directory."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import pwd
import re
from typing import Any

from llmd.config import EngineConfig
from llmd.engine.installed import Versions, read_versions
from llmd.errors import ReleaseError
from llmd.releases.digests import DigestCache
from llmd.releases.model_files import ChatTemplate, ModelFiles, model_files

# Bump when a field changes meaning or goes; readers refuse records of a newer schema.
SCHEMA_VERSION = 1
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Environment values under such names are recorded as a digest, never in clear: a record is
# readable by whoever can read the state directory. The digest still shows a change in a diff.
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class EngineTable:
    """The engine's launch as llmd's `[engine]` table gives it (llmd/config/tables.py EngineConfig);
    `served_model_name` is the name clients send (the model path when none is configured)."""

    kind: str
    model: str
    served_model_name: str
    python: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Release:
    """One immutable release of engine `engine`. `created_at` is UTC (ISO 8601, milliseconds),
    `created_by` the Unix user (`root (sudo by NAME)` under sudo)."""

    name: str
    engine: str
    created_at: str
    created_by: str
    table: EngineTable
    files: ModelFiles
    versions: Versions
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (tuples become lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Release:
        """Read a record's JSON form. Raises ReleaseError for a newer schema or a bad shape."""
        if not isinstance(data, dict):
            raise ReleaseError(f"a release record is a JSON object, not {type(data).__name__}")
        schema = data.get("schema")
        if not isinstance(schema, int) or schema > SCHEMA_VERSION:
            raise ReleaseError(
                f"release record schema {schema!r}: this llmd reads schema {SCHEMA_VERSION} "
                "and older"
            )
        try:
            table = {**data["table"]}
            table["command"], table["args"] = tuple(table["command"]), tuple(table["args"])
            files = {**data["files"]}
            if files["chat_template"] is not None:
                files["chat_template"] = ChatTemplate(**files["chat_template"])
            return cls(
                name=data["name"],
                engine=data["engine"],
                created_at=data["created_at"],
                created_by=data["created_by"],
                table=EngineTable(**table),
                files=ModelFiles(**files),
                versions=Versions(**data["versions"]),
                schema=schema,
            )
        except (KeyError, TypeError) as exc:
            raise ReleaseError(f"release record {data.get('name')!r} is malformed: {exc}") from exc


def check_name(name: str) -> str:
    """`name` if it is a valid release name (letters, digits, `.`, `_`, `-`; 64 at most; not
    starting with a dot or dash). Raises ReleaseError."""
    if not NAME_PATTERN.fullmatch(name):
        raise ReleaseError(
            f"release name {name!r}: use letters, digits, '.', '_' and '-' (64 at most), "
            "starting with a letter or digit"
        )
    return name


def engine_table(engine: EngineConfig) -> EngineTable:
    """The table of `engine`, secret-looking environment values replaced by their digest."""
    env = {
        key: secret_digest(value) if _SECRET_NAME.search(key) else value
        for key, value in sorted(engine.env.items())
    }
    return EngineTable(
        kind=engine.kind,
        model=engine.model,
        served_model_name=engine.model_name,
        python=engine.python,
        command=engine.command,
        args=engine.args,
        env=env,
    )


def secret_digest(value: str) -> str:
    """How a record keeps a secret-looking environment value: `sha256:` and 16 hex digits."""
    return f"sha256:{hashlib.sha256(value.encode()).hexdigest()[:16]}"


def build_release(
    name: str, engine_name: str, engine: EngineConfig, cache: DigestCache, nvml: Any
) -> Release:
    """A new release of `engine` (named `engine_name` in the config) now, by the current user:
    files hashed through `cache`, versions probed (the driver through `nvml`).
    Raises ReleaseError for a bad name or a model file that cannot be read."""
    check_name(name)
    try:
        files = model_files(engine.model, engine.args, cache)
    except OSError as exc:
        raise ReleaseError(f"cannot read the model's files: {exc}") from exc
    return Release(
        name=name,
        engine=engine_name,
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        created_by=unix_user(),
        table=engine_table(engine),
        files=files,
        versions=read_versions(engine, nvml),
    )


def unix_user() -> str:
    """The effective Unix user's name (its uid when the user database has none), with the
    invoking user under sudo (`SUDO_USER`)."""
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    sudo = os.environ.get("SUDO_USER")
    return f"{user} (sudo by {sudo})" if sudo and sudo != user else user
