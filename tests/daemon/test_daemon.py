"""The daemon in-process on the simulator: reload is start-up again (every config field either
takes effect on the live parts or is reported), a refused reload changes nothing, a restart
applies a pending engine table, and shutdown runs every step even when one fails."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import re
import signal
import time
import tomllib
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import structlog
import tomli_w

from llmd.admin.client import AdminRefused, admin_request
from llmd.admission.capacity import CapacityGate
from llmd.admission.classes import Priority
from llmd.config import AdmissionConfig, Config, load_config
from llmd.config.release import ReleaseConfig
from llmd.daemon.daemon import TICK_S, Daemon
from llmd.daemon.listeners import send_buffer
from llmd.events import recent_events
from llmd.logs import line_limiter
from llmd.routing.breaker import BreakerPolicy
from llmd.supervisor.supervisor import Supervisor
from llmd.validation.validator import Validator
from tests.support.inprocess import running_daemon
from tests.support.llmd_process import free_port, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until

Probe = Callable[[Daemon], Any]


def _class_probe(cls: Priority, field: str) -> Probe:
    return lambda d: getattr(d.state.admission.scheduler.classes[cls].policy, field)


def _budget_probe(cls: Priority) -> Probe:
    """The SLO guard's TTFT p95 budget of `cls` in ms (0: none)."""
    return lambda d: d.state.admission.guard.policy.budgets_s.get(cls, 0.0) * 1000


def _guard_probe(field: str) -> Probe:
    return lambda d: getattr(d.state.admission.guard.policy, field)


def _main(d: Daemon) -> Supervisor:
    return d.backends.supervisors["main"]


def _validator(d: Daemon) -> Validator:
    return d.state.validators.for_model("tiny")


def _gate(d: Daemon) -> CapacityGate:
    return d.state.admission.capacity.gate("main")


def _breaker_probe(field: str) -> Probe:
    """What every upstream's breaker follows (and the next upstream's will)."""
    return lambda d: getattr(d.state.admission.gates.breaker_policy, field)


def _renderer(d: Daemon) -> str:
    last = structlog.get_config()["processors"][-1]
    return "console" if isinstance(last, structlog.dev.ConsoleRenderer) else "json"


def _head_limits(daemon: Daemon) -> tuple[int, int, float, float]:
    """The request-head limits and deadline the public server's HTTP protocol reads at each
    request, and the keep-alive it reads for each connection."""
    protocol = daemon.listeners.servers[0].config.http_protocol_class
    server = protocol.server_config()  # type: ignore[attr-defined]
    limits = server.max_header_bytes, server.max_headers, server.read_timeout_s
    return (*limits, server.keepalive_timeout_s)


def _release_probe(field: str) -> Probe:
    """What the next deploy reads of `[release]` (llmd/releases/orchestrator.py)."""
    return lambda d: getattr(d.state.config.release, field)


# Where each key's value is in use on the live daemon (what the code reads when it acts).
# A field added to the config without a probe here fails the walk, unless a reload reports it.
PROBES: dict[str, Probe] = {
    "server.listen": lambda d: d.listeners.public.getsockname()[1] if d.listeners.public else None,
    "server.runtime_dir": lambda d: str(d.paths.root),
    "server.max_body_bytes": lambda d: d.state.config.server.max_body_bytes,
    "server.drain_timeout_s": lambda d: d.state.config.server.drain_timeout_s,
    "server.send_timeout_s": lambda d: d.state.config.server.send_timeout_s,
    "server.send_buffer_bytes": lambda d: (
        send_buffer(d.listeners.public) if d.listeners.public else None
    ),
    "server.max_connections": lambda d: (
        d.listeners.proxy.config.limit_concurrency if d.listeners.proxy else None
    ),
    "server.max_header_bytes": lambda d: _head_limits(d)[0],
    "server.max_headers": lambda d: _head_limits(d)[1],
    "server.read_timeout_s": lambda d: _head_limits(d)[2],
    "server.keepalive_timeout_s": lambda d: _head_limits(d)[3],
    "server.cors_allowed_origins": lambda d: d.state.config.server.cors_allowed_origins,
    "supervisor.backoff_initial_s": lambda d: _main(d).policy.backoff_initial_s,
    "supervisor.backoff_max_s": lambda d: _main(d).policy.backoff_max_s,
    "supervisor.max_failed_boots": lambda d: {
        _main(d).policy.max_failed_boots,
        d.reporter.max_failed_boots,
    },
    "supervisor.failure_window_s": lambda d: _main(d).policy.failure_window_s,
    "logging.level": lambda d: logging.getLevelName(logging.getLogger().level).lower(),
    "logging.format": _renderer,
    "logging.requests": lambda d: d.state.observer.log_requests,
    "logging.rate_limit_lines": lambda d: line_limiter().lines,
    "logging.rate_limit_window_s": lambda d: line_limiter().window_s,
    "telemetry.engine_interval_s": lambda d: d.telemetry.scraper.config.engine_interval_s,
    "telemetry.gpu_interval_s": lambda d: d.telemetry.scraper.config.gpu_interval_s,
    "telemetry.top_tenants": lambda d: d.state.observer.metrics.tenant.limit,
    "telemetry.otlp_endpoint": lambda d: d.state.observer.otlp_endpoint,
    "validation.context_policy": lambda d: _validator(d).config.context_policy,
    "validation.default_max_tokens": lambda d: _validator(d).config.default_max_tokens,
    "validation.max_tokens_limit": lambda d: _validator(d).config.max_tokens_limit,
    "validation.max_n": lambda d: _validator(d).config.max_n,
    "validation.max_prompts": lambda d: _validator(d).config.max_prompts,
    "validation.max_tokenize_calls": lambda d: _validator(d).remote_turns.slots,
    "validation.tokenizer": lambda d: "engine" if _validator(d).local is None else "auto",
    "validation.tokenizer_path": lambda d: _validator(d).tokenizer_path,
    "admission.tenants_file": lambda d: str(d.state.admission.tenants.path or ""),
    "admission.max_in_flight": lambda d: _gate(d).max_in_flight,
    "admission.max_queued_bytes": lambda d: d.state.admission.bodies.limit,
    "admission.batch_reserve": lambda d: _gate(d).batch_reserve,
    "admission.kv_high_watermark": lambda d: _gate(d).kv_high_watermark,
    "admission.kv_overcommit": lambda d: _gate(d).kv_overcommit,
    "admission.max_engine_waiting": lambda d: _gate(d).max_engine_waiting,
    "admission.batch_pace_ms": lambda d: d.state.admission.capacity.pace("main").interval_s,
    "admission.device_hold_ratio": lambda d: d.state.admission.holds.hold.bound_s,
    "admission.device_batch_seats": lambda d: d.state.admission.holds.hold.batch_seats,
    "admission.device_pause": lambda d: d.state.admission.holds.hold.pause,
    "usage.keep_days": lambda d: d.state.config.usage.keep_days,
    "usage.flush_interval_s": lambda d: d.state.config.usage.flush_interval_s,
    "routing.prefix_chars": lambda d: d.state.admission.gates.prefix_chars,
    "routing.epsilon": lambda d: d.state.admission.capacity.affinity.epsilon,
    "routing.slack": lambda d: d.state.admission.capacity.affinity.slack,
    "routing.probe_interval_s": lambda d: d.config.routing.probe_interval_s,
    # The Responses store reads its limits through this on each write and read.
    "responses.max_bytes": lambda d: d._responses().max_bytes,
    "responses.ttl_s": lambda d: d._responses().ttl_s,
    **{
        f"routing.breaker.{field.name}": _breaker_probe(field.name)
        for field in dataclasses.fields(BreakerPolicy)
    },
    **{
        f"release.{field.name}": _release_probe(field.name)
        for field in dataclasses.fields(ReleaseConfig)
    },
    **{
        f"admission.{cls.label}.{field}": _class_probe(cls, field)
        for cls in Priority
        for field in ("queue_size", "queue_timeout_s", "aging_s")
    },
    **{f"admission.{cls.label}.ttft_p95_budget_ms": _budget_probe(cls) for cls in Priority},
    "admission.guard.window_s": lambda d: d.state.admission.guard.window_s,
    **{
        f"admission.guard.{field}": _guard_probe(field)
        for field in ("min_samples", "dwell_s", "recover_ratio", "max_tokens_cap")
    },
}
# Values a generic change would make invalid; the walk uses these instead.
SPECIAL: dict[str, Callable[[Path], Any]] = {
    "server.listen": lambda workdir: f"127.0.0.1:{free_port()}",
    "server.runtime_dir": lambda workdir: str(workdir / "other-run"),
    "admission.tenants_file": lambda workdir: str(workdir / "tenants.toml"),
    "server.cors_allowed_origins": lambda workdir: ["http://localhost:3000"],
    "release.canary_steps": lambda workdir: "10,50,100",
    "release.ttft_buckets": lambda workdir: "256,1024",
    "release.max_ttft_p95_ratio": lambda workdir: 2.0,
    # The discard port: an exporter that would send there has nowhere to send.
    "telemetry.otlp_endpoint": lambda workdir: "http://127.0.0.1:9/v1/traces",
}
_INTERACTIVE_BUDGET_S = AdmissionConfig().interactive.ttft_p95_budget_ms / 1000
# What the live probe reads for a configured value, where the two differ in form.
LIVE_FORM: dict[str, Callable[[Any], Any]] = {
    "server.listen": lambda value: int(value.rpartition(":")[2]),
    "supervisor.max_failed_boots": lambda value: {value},
    # 0 is no limit: uvicorn's None.
    "server.max_connections": lambda value: value or None,
    # The hold's bound: the ratio x the interactive class's default TTFT budget.
    "admission.device_hold_ratio": lambda value: value * _INTERACTIVE_BUDGET_S,
    "admission.batch_pace_ms": lambda value: value / 1000,
}


# Tables of named tables: walked by their own tests (tests/backends/test_fleet_sim.py: an
# upstream added, changed and removed by a reload; tests/daemon/test_reload.py and
# tests/daemon/test_backends.py: engines added and removed by `llmd restart --engine`).
NAMED_TABLES = ("engines", "upstreams", "swap_groups")


def leaf_fields(cls: type[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every key of the config (dotted) and its type, generated from the dataclasses."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name == "source" or field.name in NAMED_TABLES:
            continue
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            yield from leaf_fields(hint, f"{prefix}{field.name}.")  # type: ignore[arg-type]
        else:
            yield f"{prefix}{field.name}", hint


def changed_value(key: str, hint: Any, value: Any, workdir: Path) -> Any:
    """A different valid value for `key` (of type `hint`, now `value`)."""
    if key in SPECIAL:
        return SPECIAL[key](workdir)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return [choice for choice in typing.get_args(hint) if choice != value][-1]
    if origin is tuple:
        return [*value, "--walk"]
    if origin is dict:
        return {**value, "LLMD_WALK": "1"}
    if hint is bool:
        return not value
    if hint is int:
        return value + 1
    if hint is float:
        return value / 2 if value else 1.0
    assert hint is str, f"{key}: no way to change a {hint}"
    return f"{value}-walk" if value else "walk"


def config_value(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def with_value(raw: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A deep copy of TOML table `raw` with `key` set to `value`."""
    copy = tomllib.loads(tomli_w.dumps(raw))
    *tables, name = key.split(".")
    table = copy
    for part in tables:
        table = table.setdefault(part, {})
    table[name] = value
    return copy


@dataclasses.dataclass
class Live:
    daemon: Daemon
    config_file: Path
    raw: dict[str, Any]
    workdir: Path
    main: asyncio.Task[None]

    async def reload(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Write `raw` as the config file and reload through the admin API; its answer."""
        self.config_file.write_text(tomli_w.dumps(raw))
        answer: dict[str, Any] = await admin_request(
            self.daemon.paths.admin_socket, "POST", "/reload"
        )
        loading = self.daemon.state.validators.for_model("tiny").loading
        if loading is not None:
            await asyncio.wait({loading})
        return answer


@pytest.fixture
async def live() -> AsyncIterator[Live]:
    """An in-process daemon on the simulator, serving, its config in a file it reloads."""
    workdir = short_tmpdir("llmd-walk-")
    text = sim_config(
        ensure_tiny_model(),
        server={
            "listen": f"127.0.0.1:{free_port()}",
            "runtime_dir": str(workdir / "run"),
            "state_dir": str(workdir / "state"),
        },
    )
    raw = tomllib.loads(text)
    config_file = workdir / "llmd.toml"
    config_file.write_text(text)
    (workdir / "tenants.toml").write_text('[tenants.walk]\nkeys = ["' + "a" * 64 + '"]\n')
    async with running_daemon(load_config(config_file)) as (daemon, main):
        assert await until(lambda: daemon.state.engine.serving, timeout_s=60)
        yield Live(daemon, config_file, raw, workdir, main)


async def test_every_config_field_takes_effect_or_is_reported(live: Live) -> None:
    """Walk every key of the config (from the dataclasses, so a new key is covered): after a
    reload that changes it alone, the live part that reads it uses the new value, or the answer
    reports it (listen, runtime dir: llmd restart; engine: the next `llmd restart`) and the live
    value stays; a reload back restores what was in use."""
    daemon = live.daemon
    walked, reported = [], []
    for key, hint in leaf_fields(Config):
        old = config_value(daemon.config, key)
        new = changed_value(key, hint, old, live.workdir)
        probe = PROBES.get(key)
        before = probe(daemon) if probe else None
        engine_before = _main(daemon).engine
        answer = await live.reload(with_value(live.raw, key, new))
        if key in answer["needs_restart"]:
            reported.append(key)
            assert key in (answer["llmd_restart"] + answer["engine_pending"])
            assert probe is None or probe(daemon) == before, key
            assert _main(daemon).engine == engine_before, key
            assert config_value(daemon.config, key) == old, key
        else:
            assert probe is not None, f"{key}: neither applied (no probe) nor reported"
            expected = LIVE_FORM.get(key, lambda value: value)(new)
            if isinstance(expected, list):
                expected = tuple(expected)
            assert probe(daemon) == expected, key
        walked.append(key)
        back = await live.reload(live.raw)
        assert back["needs_restart"] == [], key
        assert probe is None or probe(daemon) == before, f"{key} after the reload back"
    assert len(walked) == len(list(leaf_fields(Config))) and len(walked) >= 56
    assert {"server.listen", "server.runtime_dir", "engine.args", "engine.model"} <= set(reported)
    assert "server.state_dir" in reported
    assert all(key.startswith("engine.") for key in reported if not key.startswith("server."))
    assert daemon.state.engine.serving and daemon.backends.pending_engine is None


async def test_a_reload_the_config_refuses_changes_nothing(live: Live) -> None:
    """A file that does not validate (a bad value, a missing tenants file) is refused with the
    reason, and every live value stays as it was."""
    daemon = live.daemon
    before = {key: probe(daemon) for key, probe in PROBES.items()}
    for bad, why in (
        (with_value(live.raw, "admission.kv_high_watermark", 2.0), "kv_high_watermark"),
        (with_value(live.raw, "admission.tenants_file", "/nonexistent/t.toml"), "tenants"),
        (with_value(live.raw, "nonsense", 1), "unknown key nonsense"),
    ):
        with pytest.raises(AdminRefused, match=why):
            await live.reload(bad)
        assert {key: probe(daemon) for key, probe in PROBES.items()} == before


async def _sighup(live: Live, event: str) -> None:
    """Send the daemon SIGHUP (through its signal queue) and wait until it has logged `event`
    since; it keeps running."""
    sent = time.time()
    live.daemon._signals.put_nowait(signal.SIGHUP)
    assert await until(
        lambda: any(e.event == event and e.at >= sent for e in recent_events().recent()),
        timeout_s=30,
    )
    assert not live.main.done()


async def test_a_file_not_utf8_is_refused_by_reload_and_by_sighup(live: Live) -> None:
    """A config or tenants file with a byte that is not UTF-8 (a Latin-1 comment): the reload
    is refused naming the file and line, SIGHUP logs the refusal and llmd serves on, and every
    live value stays as it was."""
    daemon = live.daemon
    before = {key: probe(daemon) for key, probe in PROBES.items()}
    tenants = live.workdir / "tenants.toml"
    good = tomli_w.dumps(live.raw).encode()
    line = len(good.splitlines()) + 1
    cases = (
        (good + b"# caf\xe9\n", f"{live.config_file}:{line}: cannot read config: not UTF-8"),
        (
            tomli_w.dumps(with_value(live.raw, "admission.tenants_file", str(tenants))).encode(),
            f"{tenants}:2: cannot read tenants file: not UTF-8",
        ),
    )
    tenants.write_bytes(b'[tenants.walk]\n# \xff\nkeys = ["' + b"a" * 64 + b'"]\n')
    for data, why in cases:
        live.config_file.write_bytes(data)
        with pytest.raises(AdminRefused, match=re.escape(why)):
            await admin_request(daemon.paths.admin_socket, "POST", "/reload")
        await _sighup(live, "reload_rejected")
        assert {key: probe(daemon) for key, probe in PROBES.items()} == before
    status = await admin_request(daemon.paths.admin_socket, "GET", "/status")
    assert status["engine"]["state"] == "serving"


async def test_a_reload_that_fails_unexpectedly_is_answered_in_json(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a reload raises, the admin API answers llmd's JSON error (500 internal_error,
    which `llmd reload` prints), never a plain-text 500, and SIGHUP logs it and serves on."""

    def broken() -> None:
        raise RuntimeError("a bug on purpose")

    monkeypatch.setattr(live.daemon.live_config, "reload", broken)
    with pytest.raises(AdminRefused, match=r"reload failed inside llmd \(RuntimeError\)"):
        await admin_request(live.daemon.paths.admin_socket, "POST", "/reload")
    await _sighup(live, "reload_failed")
    status = await admin_request(live.daemon.paths.admin_socket, "GET", "/status")
    assert status["engine"]["state"] == "serving"


async def test_restart_applies_the_pending_engine_table(live: Live) -> None:
    """engine.args changed by a reload wait; `restart` boots the new command line and what llmd
    derives from it follows (max_in_flight from --max-num-seqs)."""
    daemon = live.daemon
    args = [*live.raw["engine"]["args"], "--max-num-seqs", "40"]
    answer = await live.reload(with_value(live.raw, "engine.args", args))
    assert answer["engine_pending"] == ["engine.args"]
    assert _gate(daemon).max_in_flight == 128
    restarted = await admin_request(daemon.paths.admin_socket, "POST", "/restart", timeout_s=120)
    assert restarted["restarted"] and restarted["applied"] == ["engine.args"]
    assert restarted["engine"] == "serving"
    assert _main(daemon).engine.args == tuple(args)
    assert _gate(daemon).max_in_flight == 40 and daemon.backends.pending_engine is None
    again = await admin_request(daemon.paths.admin_socket, "POST", "/restart", timeout_s=120)
    assert again["applied"] == []


async def test_removing_an_engine_never_stops_llmd(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine llmd stops and forgets (a canary's end, a reload's removal) leaves the main
    loop's view before its supervisor's task ends, so the loop never takes it for an engine
    that ended on its own (which stopped llmd, exit 1, when the task ended before `stop()`
    returned: seen in CI); llmd serves on."""
    daemon = live.daemon
    daemon.backends.add_engine("extra", daemon.config.engine_tables["main"])
    assert await until(lambda: daemon.state.fleet.engines["extra"].serving, timeout_s=60)
    task = daemon.backends.tasks["extra"]
    supervisor = daemon.backends.supervisors["extra"]
    stop = supervisor.stop

    async def stop_after_the_task_ended() -> None:  # the order a slow reap gives
        await stop()
        await asyncio.wait({task})
        await asyncio.sleep(TICK_S * 1.5)  # the main loop wakes at least once meanwhile

    monkeypatch.setattr(supervisor, "stop", stop_after_the_task_ended)
    seen_at_end: list[bool] = []
    task.add_done_callback(lambda _: seen_at_end.append("extra" in daemon.backends.tasks))
    await daemon.backends.remove_engine("extra")
    assert seen_at_end == [False]
    assert not live.main.done() and daemon.state.engine.serving


async def test_shutdown_runs_every_step_when_one_fails(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that raises (here: stopping the engine) is logged, the later steps still run
    (sockets removed), and the exit status says it failed."""
    daemon = live.daemon

    async def broken_stop() -> None:
        raise RuntimeError("stop failed on purpose")

    real_stop = _main(daemon).stop
    monkeypatch.setattr(_main(daemon), "stop", broken_stop)
    await daemon.shutdown()
    assert not daemon.paths.admin_socket.exists()
    assert daemon.exit_code == 1
    monkeypatch.setattr(_main(daemon), "stop", real_stop)
    await real_stop()  # the engine this test left running


async def test_shutdown_closes_sessions_opened_after_the_proxy_stopped(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend connection a reader (telemetry's scrape, an upstream probe) opened after the
    proxy's lifespan had closed the clients, while the engines stop, is closed by shutdown too:
    none is left to the garbage collector."""
    daemon = live.daemon
    stop_engines = daemon.backends.stop_engines
    opened: list[asyncio.Transport | None] = []

    async def scrape_then_stop() -> None:
        client = daemon.state.fleet.client("main")
        await client.fetch("GET", "/health", timeout_s=10)  # what a late scrape does
        opened.extend(connection.transport for connection in client.pool().idle)
        await stop_engines()

    monkeypatch.setattr(daemon.backends, "stop_engines", scrape_then_stop)
    daemon._signals.put_nowait(signal.SIGTERM)
    await asyncio.wait({live.main}, timeout=30)
    await daemon.shutdown()
    assert len(opened) == 1 and opened[0] is not None and opened[0].is_closing()


async def test_start_up_objects_are_frozen_once_the_tokenizer_loaded(live: Live) -> None:
    """Once the tokenizer load has ended, start-up's objects leave the garbage collector's
    generations (gc.freeze); shutdown gives them back."""
    daemon = live.daemon
    assert await until(lambda: daemon.housekeeping.gc_frozen, timeout_s=30)
    assert daemon.state.validators.loaded()
    assert gc.get_freeze_count() > 10_000
    await daemon.shutdown()
    assert gc.get_freeze_count() == 0
