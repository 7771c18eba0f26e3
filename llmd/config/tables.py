"""llmd's configuration: one TOML file loaded once into frozen, typed dataclasses.

Every key and its default is documented in `etc/llmd.toml`. A wrong key or type fails at load
time with a `ConfigError` naming the key, the value (never one that may be a secret, nor that of
an unknown key) and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Literal

from llmd.binding import at_line, bind_table, read_toml
from llmd.config.backends import (
    MAIN,
    EngineConfig,
    RoutingConfig,
    UpstreamConfig,
    check_backends,
    engine_tables,
)
from llmd.config.release import ReleaseConfig, release_config
from llmd.config.swap import SwapGroupConfig, check_swap_groups
from llmd.errors import ConfigError
from llmd.numerals import ascii_int

__all__ = [
    "MAIN",
    "AdmissionConfig",
    "ClassConfig",
    "Config",
    "EngineConfig",
    "GuardConfig",
    "LoggingConfig",
    "RoutingConfig",
    "ServerConfig",
    "SupervisorConfig",
    "SwapGroupConfig",
    "TelemetryConfig",
    "UpstreamConfig",
    "UsageConfig",
    "ValidationConfig",
    "config_path",
    "load_config",
]

DEFAULT_CONFIG_PATH = Path("/etc/llmd/llmd.toml")
# The tenant of every request while no tenants file is configured, and of one refused before
# its key was read (the label `anonymous` in metrics and the request log).
ANONYMOUS = "anonymous"
# The longest a device pause may stop an engine, ms: under the 5 s an engine's health probe
# waits (llmd/supervisor/supervisor.py), so a paused engine never looks dead.
MAX_PAUSE_MS = 4000.0


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """The public HTTP listener, the runtime directory (admin and engine sockets) and the
    state directory (release records and the deploy history: llmd/releases/store.py).
    """

    listen: str = "127.0.0.1:8000"
    runtime_dir: str = "/run/llmd"
    state_dir: str = "/var/lib/llmd"
    max_body_bytes: int = 4 * 1024 * 1024  # as sent and once decoded
    # Requests the public listener has in progress at once (open connections without one do
    # not count); past it, 503 too_many_connections. 0: no limit.
    max_connections: int = 2048
    max_header_bytes: int = 32 * 1024  # the request line and headers
    max_headers: int = 100  # how many
    # Origins whose web pages may call the API (`"*"`: any); none by default.
    cors_allowed_origins: tuple[str, ...] = ()
    drain_timeout_s: float = 30.0
    send_timeout_s: float = 15.0
    send_buffer_bytes: int = 65536
    # How long a request's head (request line and headers, counted from the connection or the
    # request's first byte), and then its body, may take to arrive; past it, 408
    # request_timeout and the connection closes (a connection that sent nothing is closed
    # quietly). 0: no limit.
    read_timeout_s: float = 30.0
    # How long an idle kept-alive client connection stays open for its next request: longer
    # than the longest idle time common client pools keep a connection (Go's net/http 90 s),
    # so a client never sends on a connection llmd is closing (README, "Keep-alive").
    keepalive_timeout_s: float = 120.0

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


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
    """How often the engine's /metrics and the GPUs are read, and the tenant label bound."""

    engine_interval_s: float = 0.5
    gpu_interval_s: float = 1.0
    # Tenants past this many distinct ones share the Prometheus label `other`.
    top_tenants: int = 20
    # Where llmd exports its spans (OTLP over HTTP, the traces URL); "": none, and nothing of
    # OpenTelemetry is imported (llmd/telemetry/tracing.py).
    otlp_endpoint: str = ""


@dataclasses.dataclass(frozen=True)
class UsageConfig:
    """Usage kept in the state directory (llmd/usage/store.py): how long, and how often the
    daemon writes what it gathered (with the token budgets' state)."""

    keep_days: int = 90  # hours older than this many days are dropped (0: kept forever)
    flush_interval_s: float = 2.0  # a crash loses at most this much of usage and budgets


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """Request validation: the context-length policy, output-token defaults, the tokenizer."""

    # When prompt + max_tokens does not fit the context: `reject` (400
    # `context_length_exceeded`) or `clamp` (lower max_tokens to what fits).
    context_policy: Literal["reject", "clamp"] = "reject"
    # Written into chat requests that omit max_tokens (0: the engine's own default, the rest of
    # the context).
    default_max_tokens: int = 2048
    # The most output tokens one request may ask for (0: only the context limits it).
    max_tokens_limit: int = 0
    max_n: int = 16  # the most sequences (`n`) one request may ask per prompt
    max_prompts: int = 64  # the most prompts one completions request may carry
    # `auto` (local if it loads, else the engine's /tokenize) or `engine` (always ask).
    tokenizer: Literal["auto", "engine"] = "auto"
    tokenizer_path: str = ""  # where the local tokenizer is loaded from (default: engine.model)
    # Requests counted through the engine's /tokenize at once (the others wait their turn,
    # interactive first).
    max_tokenize_calls: int = 8


@dataclasses.dataclass(frozen=True)
class ClassConfig:
    """One priority class's queue: its size (requests), its timeout and its aging time (s)."""

    queue_size: int = 1024
    queue_timeout_s: float = 60.0
    # When this class has had requests waiting and no release for this long, it gets the next
    # release ahead of higher classes (see llmd/admission/scheduler).
    aging_s: float = 10.0
    # The class's time-to-first-token p95 budget the SLO guard keeps (llmd/admission/guard.py;
    # 0: none).
    ttft_p95_budget_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class GuardConfig:
    """The SLO guard's settings (llmd/admission/guard.py)."""

    window_s: int = 60  # a class's TTFT p95 is taken over the last this many seconds (10-300)
    min_samples: int = 20  # and counts once it rests on this many requests
    dwell_s: float = 10.0  # the level changes at most this often (s)
    # The level falls only while every class is under recover_ratio (0-1) x its budget.
    recover_ratio: float = 0.8
    # From level 2, normal and batch requests released get at most this many output tokens.
    max_tokens_cap: int = 256


@dataclasses.dataclass(frozen=True)
class AdmissionConfig:
    """Admission: tenants, per-class queues, and the capacity gate in front of the engine.
    The engine's load comes from the telemetry scraper (`telemetry.engine_interval_s`).
    """

    # TOML file of tenants and their key hashes ("" = one anonymous tenant).
    tenants_file: str = ""
    # Requests llmd lets into the engine at once (0 = the engine's `--max-num-seqs` from
    # engine.args, else 128).
    max_in_flight: int = 0
    # Request bodies llmd may hold for requests not yet sent to the engine (being read,
    # validated or queued); past it new requests get 429 queue_full (0: no limit).
    max_queued_bytes: int = 256 * 1024 * 1024
    # Of max_in_flight, the slots batch requests may not take (kept for interactive and normal).
    batch_reserve: int = 4
    # Fraction of the KV cache past which nothing new is released.
    kv_high_watermark: float = 0.9
    # How many times that budget the reserved prompt + max_tokens of running requests may sum to.
    kv_overcommit: float = 1.0
    # Release normal and batch requests only while the engine reports at most this many waiting,
    # in requests the size of the one released (vLLM counts each sequence waiting:
    # llmd/admission/capacity.py).
    max_engine_waiting: int = 4
    # Batch pacing (llmd/admission/pacing.py): batch requests go into a supervised engine at
    # most one sequence per this many ms (its time to take a new sequence in), so its own queue
    # stays short for the next interactive request (0: no pacing, the default: a fixed pace
    # fitted to one engine would hold back a faster one's batch).
    batch_pace_ms: float = 0.0
    # The device hold (llmd/admission/sharing.py): a new batch request waits while an interactive
    # one on another engine of its device waits for its first token, for at most this fraction
    # of the interactive class's ttft_p95_budget_ms (0, or no interactive budget: no hold).
    device_hold_ratio: float = 0.2
    # The device hold's seat limit: while interactive work is present on an engine (queued,
    # running, or within the last 2 s), at most this many batch requests run at once on each
    # other engine of its device (0: no limit).
    device_batch_seats: int = 1
    # The device pause: while an interactive request waits for its first token on an engine,
    # each other engine of its device that runs batch requests only is stopped (SIGSTOP to its
    # process group) until that first token, for at most the hold's bound each time.
    device_pause: bool = False
    interactive: ClassConfig = dataclasses.field(
        default_factory=lambda: ClassConfig(
            queue_size=256, queue_timeout_s=10.0, aging_s=0.0, ttft_p95_budget_ms=1500.0
        )
    )
    normal: ClassConfig = dataclasses.field(
        default_factory=lambda: ClassConfig(
            queue_size=1024, queue_timeout_s=60.0, aging_s=5.0, ttft_p95_budget_ms=6000.0
        )
    )
    batch: ClassConfig = dataclasses.field(
        default_factory=lambda: ClassConfig(queue_size=4096, queue_timeout_s=600.0, aging_s=15.0)
    )
    guard: GuardConfig = dataclasses.field(default_factory=GuardConfig)


@dataclasses.dataclass(frozen=True)
class ResponsesConfig:
    """The Responses store (llmd/endpoints/store.py): what `store: true` asks to keep, in
    SQLite in `server.state_dir`, per tenant."""

    # Per tenant, bytes of stored responses and their input (JSON); past it the oldest go first
    # (0: nothing is stored, every `previous_response_id` is unknown).
    max_bytes: int = 256 * 1024 * 1024
    # A stored response is forgotten this long after it was stored (s; at most 30 days, as
    # OpenAI keeps them).
    ttl_s: float = 30 * 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole configuration, as loaded from one TOML file.

    The supervised engines are `[engine]` alone (one engine named `main`) or `[engines.NAME]`
    (never both): read them from `engine_tables`. `upstreams` are servers llmd routes to but
    does not supervise; `routing` says how a request picks one backend of its model's pool.
    """

    server: ServerConfig = dataclasses.field(default_factory=ServerConfig)
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    engines: dict[str, EngineConfig] = dataclasses.field(default_factory=dict)
    upstreams: dict[str, UpstreamConfig] = dataclasses.field(default_factory=dict)
    routing: RoutingConfig = dataclasses.field(default_factory=RoutingConfig)
    supervisor: SupervisorConfig = dataclasses.field(default_factory=SupervisorConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    telemetry: TelemetryConfig = dataclasses.field(default_factory=TelemetryConfig)
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    admission: AdmissionConfig = dataclasses.field(default_factory=AdmissionConfig)
    usage: UsageConfig = dataclasses.field(default_factory=UsageConfig)
    release: ReleaseConfig = dataclasses.field(default_factory=ReleaseConfig)
    responses: ResponsesConfig = dataclasses.field(default_factory=ResponsesConfig)
    # Engines that take turns being awake (llmd/config/swap.py), by group name.
    swap_groups: dict[str, SwapGroupConfig] = dataclasses.field(default_factory=dict)
    source: str = ""

    @property
    def engine_tables(self) -> dict[str, EngineConfig]:
        """Every supervised engine by name, in config order: `[engines.NAME]`, or `[engine]`
        alone as `main` (none when neither names a model: an llmd of upstreams only)."""
        if self.engines:
            return self.engines
        return {MAIN: self.engine} if self.engine.model else {}

    def served_models(self) -> list[str]:
        """The model names the config itself names: each engine's served name and each
        upstream's `models` (an upstream without them adds what its /v1/models lists)."""
        names = [engine.model_name for engine in self.engine_tables.values()]
        names += [model for upstream in self.upstreams.values() for model in upstream.models]
        return list(dict.fromkeys(names))


def config_path(explicit: str | None) -> Path:
    """The config file to read: `--config`, else `$LLMD_CONFIG`, else /etc/llmd/llmd.toml."""
    return Path(explicit or os.environ.get("LLMD_CONFIG") or DEFAULT_CONFIG_PATH)


def load_config(path: Path, *, listen: str | None = None, runtime_dir: str | None = None) -> Config:
    """Read, validate and freeze the config at `path`; CLI overrides replace file values.

    Relative model paths, and a relative `server.runtime_dir` or `server.state_dir`, are
    resolved against the config file's directory (a CLI override stays as given). Raises
    `ConfigError` for a missing or unreadable file, one not UTF-8, bad TOML, unknown keys,
    wrong types or values out of range, and the cross-table checks of llmd/config/backends.py
    (both `[engine]` and `[engines.*]`, GPU sharing without explicit KV sizes, bad upstream
    URLs) and of llmd/config/swap.py (a swap plan that cannot work).
    """
    text, raw = read_toml(path, "config")
    try:
        config: Config = bind_table(Config, {**raw, "source": str(path)}, prefix="")
    except ConfigError as exc:
        raise at_line(exc, text, str(path)) from None
    server = dataclasses.replace(
        config.server,
        listen=listen or config.server.listen,
        runtime_dir=runtime_dir or _beside(path, config.server.runtime_dir),
        state_dir=_beside(path, config.server.state_dir),
    )
    check_listen(server.listen, "server.listen")
    _check_limits(server)
    if config.usage.flush_interval_s <= 0:
        raise ConfigError(
            f"usage.flush_interval_s = {config.usage.flush_interval_s!r}: expected seconds > 0"
        )
    engines = engine_tables(config.engine if "engine" in raw else None, config.engines)
    for name, engine in engines.items():
        if not engine.model:
            where = "engine" if "engine" in raw else f"engines.{name}"
            raise ConfigError(f"{path}: {where}.model is required (a model directory or name)")
    check_backends(engines, config.upstreams, config.routing)
    check_swap_groups(engines, config.swap_groups)
    engines = {name: _resolve_model(engine, path) for name, engine in engines.items()}
    admission = _check_admission(config.admission, path)
    release_config(raw.get("release", {}))  # the checks across its keys
    single = "engine" in raw
    return dataclasses.replace(
        config,
        server=server,
        engine=engines[MAIN] if single else EngineConfig(),
        engines={} if single else engines,
        admission=admission,
    )


def _beside(path: Path, directory: str) -> str:
    """`directory` from the config at `path`, made absolute from the config's directory."""
    given = Path(directory).expanduser()
    return str(given if given.is_absolute() else (path.parent / given).resolve())


def _resolve_model(engine: EngineConfig, path: Path) -> EngineConfig:
    """A relative model path that exists beside the config file, made absolute."""
    model = Path(engine.model).expanduser()
    if not model.is_absolute() and (path.parent / model).exists():
        return dataclasses.replace(engine, model=str((path.parent / model).resolve()))
    return engine


def _check_admission(admission: AdmissionConfig, path: Path) -> AdmissionConfig:
    """Range checks, and the tenants file's path resolved from the config's directory. The file
    itself is read by admission (llmd/admission/tenants.py: `configured_tenants`), which
    `llmd check-config`, start-up and a reload call before they take the config."""
    if not 0 < admission.kv_high_watermark <= 1:
        raise ConfigError(
            f"admission.kv_high_watermark = {admission.kv_high_watermark!r}: "
            "expected a fraction in (0, 1]"
        )
    if not 0 <= admission.device_hold_ratio <= 1:
        raise ConfigError(
            f"admission.device_hold_ratio = {admission.device_hold_ratio!r}: expected a "
            "fraction in [0, 1] of the interactive class's ttft_p95_budget_ms (0: no hold)"
        )
    pause_ms = admission.device_hold_ratio * admission.interactive.ttft_p95_budget_ms
    if admission.device_pause and pause_ms > MAX_PAUSE_MS:
        raise ConfigError(
            f"admission.device_pause with a hold bound of {pause_ms:g} ms: a pause may last "
            f"at most {MAX_PAUSE_MS:g} ms (an engine's health probe waits 5 s); lower "
            "device_hold_ratio or the interactive ttft_p95_budget_ms"
        )
    if admission.batch_pace_ms < 0:
        raise ConfigError(
            f"admission.batch_pace_ms = {admission.batch_pace_ms!r}: expected the ms an engine "
            "takes to take in one new sequence (0: no pacing)"
        )
    if admission.device_batch_seats < 0:
        raise ConfigError(
            f"admission.device_batch_seats = {admission.device_batch_seats!r}: expected the "
            "most batch requests running on an engine beside interactive work (0: no limit)"
        )
    _check_guard(admission.guard)
    if not admission.tenants_file:
        return admission
    tenants = Path(admission.tenants_file).expanduser()
    if not tenants.is_absolute():
        tenants = (path.parent / tenants).resolve()
    return dataclasses.replace(admission, tenants_file=str(tenants))


def _check_guard(guard: GuardConfig) -> None:
    """The SLO guard's settings within the ranges it can work with."""
    checks = (
        ("window_s", 10 <= guard.window_s <= 300, "whole seconds in 10..300"),
        ("min_samples", guard.min_samples >= 1, "a whole number >= 1"),
        ("recover_ratio", 0 < guard.recover_ratio < 1, "a fraction in (0, 1)"),
        ("max_tokens_cap", guard.max_tokens_cap >= 1, "a whole number >= 1"),
    )
    for key, ok, expected in checks:
        if not ok:
            value = getattr(guard, key)
            raise ConfigError(f"admission.guard.{key} = {value!r}: expected {expected}")


def _check_limits(server: ServerConfig) -> None:
    """Request limits that would refuse every request."""
    for key in ("max_body_bytes", "max_header_bytes", "max_headers"):
        if getattr(server, key) == 0:
            raise ConfigError(f"server.{key} = 0: expected a whole number > 0")
    if server.keepalive_timeout_s <= 0:
        raise ConfigError(
            f"server.keepalive_timeout_s = {server.keepalive_timeout_s!r}: expected seconds > 0"
        )
    for origin in server.cors_allowed_origins:
        scheme, sep, rest = origin.partition("://")
        if origin != "*" and (not sep or not rest or "/" in rest or not _SCHEME.match(scheme)):
            raise ConfigError(
                f"server.cors_allowed_origins: {origin!r} is not an origin: expected "
                "'*' or SCHEME://HOST[:PORT] (no path), e.g. 'http://localhost:3000'"
            )


_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")


def check_listen(value: str, key: str) -> None:
    """`value` is HOST:PORT with a port in 0..65535. Raises ConfigError naming `key`."""
    host, sep, port = value.rpartition(":")
    number = ascii_int(port)
    if not sep or not host or number is None or number > 65535:
        raise ConfigError(f"{key} = {value!r}: expected HOST:PORT, e.g. '127.0.0.1:8000'")
