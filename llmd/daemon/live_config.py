"""The config in use and how it changes: `apply` configures every part from a config, at
start-up and on each reload alike (reload is start-up again, gunicorn's arbiter); `reload`
reads the file again; `apply_pending_engine` takes an engine table a reload kept pending."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from llmd.admission.tenants import configured_tenants
from llmd.config import Config, EngineConfig, config_path, load_config
from llmd.daemon.backends import Backends
from llmd.daemon.listeners import Listeners
from llmd.daemon.reload import ReloadPlan, plan_reload, with_engine_tables
from llmd.daemon.telemetry import Telemetry
from llmd.errors import ConfigError
from llmd.logs import configure_logging
from llmd.releases.orchestrator import Deployer
from llmd.state import DaemonState
from llmd.systemd.reporter import ServiceReporter

log = structlog.get_logger("llmd.daemon.daemon")


class LiveConfig:
    """The config `state` holds (the one in use) and the parts it configures: admission,
    the engines and upstreams at work (`backends`), the observer, logging, the `listeners`,
    `telemetry`, systemd's `reporter`, and the releases the engines run (`deployer`).
    `file_tables` are the config file's engine tables as last read (a deploy, or the current
    releases restored at start-up, may run others: llmd/releases/restore.py); `overrides` are
    the command line's `listen` and `runtime_dir`, which a reload keeps."""

    def __init__(
        self,
        state: DaemonState,
        backends: Backends,
        listeners: Listeners,
        telemetry: Telemetry,
        reporter: ServiceReporter,
        deployer: Deployer,
        file_tables: Mapping[str, EngineConfig],
        overrides: Mapping[str, str | None],
    ) -> None:
        self.state = state
        self.backends = backends
        self.listeners = listeners
        self.telemetry = telemetry
        self.reporter = reporter
        self.deployer = deployer
        self.file_tables = dict(file_tables)
        self.overrides = dict(overrides)

    def apply(self, config: Config) -> None:
        """Configure every part from `config`: at start-up and on each reload alike. Tenants
        are read again, admission's classes and limits, each backend's capacity, routing,
        the upstreams (added, changed, removed), validation's policy and tokenizers, the
        observer, the restart policy, logging, the listener's send buffer and connection limit
        and telemetry's intervals and OTLP endpoint all take the new values, and each engine's
        client its API key (of the engine table in use). Raises ConfigError (the tenants file,
        an OTLP endpoint without the OpenTelemetry SDK) before any part has changed."""
        admission = self.state.admission
        # These two alone can still fail: the OpenTelemetry SDK missing, the tenants file.
        use_tracing = self.state.observer.tracing_to(config.telemetry.otlp_endpoint)
        admission.configure(config)
        self.state.config = config
        self.backends.apply_upstreams(config)
        admission.configure(config)  # the limits of upstreams added just now
        self.backends.configure(config)
        self.backends.configure_validators()
        self.state.observer.configure(config.telemetry.top_tenants, config.logging.requests)
        self.state.observer.deploys_of(config.engine_tables)
        use_tracing()
        self.reporter.max_failed_boots = config.supervisor.max_failed_boots
        configure_logging(config.logging)
        self.listeners.configure(config.server)
        self.follow_telemetry()

    def reload(self) -> ReloadPlan:
        """SIGHUP or the admin API: read the config file again and `apply` it. Keys that
        cannot change in a running llmd are left as they are and listed in the plan; new,
        changed or removed engine tables are kept for `llmd restart [--engine NAME]`. Raises
        ConfigError, logged, when the file does not validate: then nothing changes."""
        self.reporter.reloading()
        current = self.state.config
        try:
            new = load_config(config_path(current.source), **self.overrides)
            configured_tenants(new.admission)  # a bad tenants file changes nothing
            # An engine's table in the file is pending when the file changed it since it was
            # last read (a deployed release runs on otherwise), or while it is pending still.
            pending = self.backends.pending
            unchanged = {n: t for n, t in self.file_tables.items() if n not in pending}
            plan = plan_reload(current, new, unchanged)
            self.apply(plan.config)
            self.file_tables = dict(new.engine_tables)
        except ConfigError as exc:
            log.error("reload_rejected", error=str(exc))
            raise
        finally:
            self.reporter.reloaded(ready=self.backends.ready())
        self.backends.pending = dict(plan.engines)
        log.info(
            "config_reloaded",
            needs_llmd_restart=plan.llmd_restart,
            engine_pending=plan.engine_keys,
        )
        return plan

    async def apply_pending_engine(self, name: str) -> list[str]:
        """`llmd restart`: engine `name`'s table a reload kept pending applies
        (`Backends.apply_pending`), and each engine's release is read again (the config
        file's table may be another release's). The keys it changed."""
        keys = await self.backends.apply_pending(name)
        if keys is None:
            return []
        self.deployer.read_releases()
        log.info("engine_config_applied", engine=name, keys=keys)
        return keys

    def apply_tables(self, tables: Mapping[str, EngineConfig]) -> None:
        """`apply` the config in use with these engine tables (a deploy's, a restart's)."""
        self.apply(with_engine_tables(self.state.config, tables))

    def follow_telemetry(self) -> None:
        """(Re)start telemetry when its intervals or the backends changed."""
        self.telemetry.follow(self.state.config.telemetry, self.state.fleet)
