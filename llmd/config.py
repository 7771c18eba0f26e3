"""llmd's configuration: one TOML file loaded once into frozen, typed dataclasses.

Every key and its default is documented in `etc/llmd.toml`. A wrong key or type fails at load
time with a `ConfigError` naming the key, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from llmd.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/llmd/llmd.toml")


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """The public HTTP listener and the runtime directory (admin and engine sockets)."""

    listen: str = "127.0.0.1:8000"
    runtime_dir: str = "/run/llmd"
    max_body_bytes: int = 4 * 1024 * 1024
    drain_timeout_s: float = 30.0

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What engine to run and how: `kind` picks the adapter (`vllm` or `sim`)."""

    kind: Literal["vllm", "sim"] = "vllm"
    model: str = ""
    served_model_name: str = ""
    python: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    start_timeout_s: float = 900.0
    stop_timeout_s: float = 20.0
    health_interval_s: float = 2.0

    @property
    def model_name(self) -> str:
        """The name clients use in `model`: `served_model_name`, else the model path."""
        return self.served_model_name or self.model


@dataclasses.dataclass(frozen=True)
class SupervisorConfig:
    """Restart policy: exponential backoff, and when to give up on a failing engine."""

    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    max_failed_boots: int = 5
    failure_window_s: float = 600.0


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """Log level and format (`auto`: console on a TTY, JSON otherwise); which finished requests
    get a line; the per-key rate limit (lines per window; 0 turns it off)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    requests: Literal["all", "failures", "off"] = "all"
    rate_limit_lines: int = 10
    rate_limit_window_s: float = 10.0


@dataclasses.dataclass(frozen=True)
class TelemetryConfig:
    """How often the engine's /metrics and the GPUs are read, and the tenant label bound.

    `top_tenants`: tenants past this many distinct ones share the Prometheus label `other`.
    """

    engine_interval_s: float = 0.5
    gpu_interval_s: float = 1.0
    top_tenants: int = 20


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """Request validation: the context-length policy, output-token defaults, the tokenizer.

    `context_policy`: what to do when prompt + max_tokens does not fit the context (`reject`: 400
    `context_length_exceeded`; `clamp`: lower max_tokens to what fits). `default_max_tokens`:
    written into chat requests that omit max_tokens (0: the engine's own default, the rest of
    the context). `max_tokens_limit`:
    the most output tokens one request may ask for (0: only the context limits it).
    `tokenizer`: `auto` (local if it loads, else the engine's /tokenize) or `engine` (always ask).
    `tokenizer_path`: where the local tokenizer is loaded from (default: `engine.model`).
    """

    context_policy: Literal["reject", "clamp"] = "reject"
    default_max_tokens: int = 2048
    max_tokens_limit: int = 0
    tokenizer: Literal["auto", "engine"] = "auto"
    tokenizer_path: str = ""


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole configuration, as loaded from one TOML file."""

    server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    supervisor: SupervisorConfig = dataclasses.field(default_factory=SupervisorConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    telemetry: TelemetryConfig = dataclasses.field(default_factory=TelemetryConfig)
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    source: str = ""


def config_path(explicit: str | None) -> Path:
    """The config file to read: `--config`, else `$LLMD_CONFIG`, else /etc/llmd/llmd.toml."""
    return Path(explicit or os.environ.get("LLMD_CONFIG") or DEFAULT_CONFIG_PATH)


def load_config(path: Path, *, listen: str | None = None, runtime_dir: str | None = None) -> Config:
    """Read, validate and freeze the config at `path`; CLI overrides replace file values.

    Relative `engine.model` paths are resolved against the config file's directory.
    Raises `ConfigError` for a missing or unreadable file, bad TOML, unknown keys or wrong types.
    """
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    config: Config = _build(Config, {**raw, "source": str(path)}, prefix="")
    server = dataclasses.replace(
        config.server,
        listen=listen or config.server.listen,
        runtime_dir=runtime_dir or config.server.runtime_dir,
    )
    _check_listen(server.listen, "server.listen")
    engine = config.engine
    if not engine.model:
        raise ConfigError(f"{path}: engine.model is required (a model directory or name)")
    model = Path(engine.model).expanduser()
    if not model.is_absolute() and (path.parent / model).exists():
        engine = dataclasses.replace(engine, model=str((path.parent / model).resolve()))
    return dataclasses.replace(config, server=server, engine=engine)


def _check_listen(value: str, key: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key} = {value!r}: expected HOST:PORT, e.g. '127.0.0.1:8000'")


def _build(cls: type[Any], raw: object, prefix: str) -> Any:
    """Build dataclass `cls` from a TOML table, checking every key and type strictly."""
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
    return cls(**values)


def _convert(hint: Any, value: object, key: str) -> object:
    """Check `value` against the annotation `hint`; ints are accepted where floats are."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, prefix=key + ".")
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


# Keys whose new value only takes effect when llmd or the engine restarts.
RESTART_KEYS = ("server.listen", "server.runtime_dir", "engine")


def reload_config(current: Config, new: Config) -> tuple[Config, list[str]]:
    """What a reload (SIGHUP) applies: `new`, except the keys in RESTART_KEYS, which keep their
    current values. Returns the config to use and the changed keys that need a restart."""
    pending = []
    if new.server.listen != current.server.listen:
        pending.append("server.listen")
    if new.server.runtime_dir != current.server.runtime_dir:
        pending.append("server.runtime_dir")
    pending += [
        f"engine.{field.name}"
        for field in dataclasses.fields(EngineConfig)
        if getattr(new.engine, field.name) != getattr(current.engine, field.name)
    ]
    server = dataclasses.replace(
        new.server, listen=current.server.listen, runtime_dir=current.server.runtime_dir
    )
    return dataclasses.replace(new, server=server, engine=current.engine), pending
