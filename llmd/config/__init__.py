"""llmd's configuration: one TOML file (`etc/llmd.toml` documents every key) loaded once into
frozen, typed dataclasses: the contract every layer reads.

    tables.py    the service's tables ([server], [admission], ...), `Config`, `load_config`
    backends.py  [engine], [engines.NAME], [upstreams.NAME], [routing]
    release.py   [release]: canary steps, comparison thresholds, the smoke gate
    swap.py      [swap_groups.NAME]: engines that take turns being awake, and their checks

May import: engine (its flags, for the cross-table checks).
"""

from llmd.config.backends import MAIN, EngineConfig, RoutingConfig, UpstreamConfig
from llmd.config.tables import (
    ANONYMOUS,
    AdmissionConfig,
    ClassConfig,
    Config,
    GuardConfig,
    LoggingConfig,
    ResponsesConfig,
    ServerConfig,
    SupervisorConfig,
    SwapGroupConfig,
    TelemetryConfig,
    UsageConfig,
    ValidationConfig,
    config_path,
    load_config,
)

__all__ = [
    "ANONYMOUS",
    "MAIN",
    "AdmissionConfig",
    "ClassConfig",
    "Config",
    "EngineConfig",
    "GuardConfig",
    "LoggingConfig",
    "ResponsesConfig",
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
