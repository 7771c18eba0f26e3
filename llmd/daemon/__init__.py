"""The daemon at work: its lifecycle (`daemon`), the device checks before start-up, the main
loop's housekeeping, the config in use (`live_config`), operator actions, reload, the backends
at work (a supervisor per engine, a probe per upstream), the telemetry task, the usage keeper,
the stall watchdog, the admin API and the listening sockets. The top of the service: it builds
every layer below and wires them.

May import: systemd, releases, proxy, state, endpoints, inflight, backends, admission, routing,
validation, telemetry, usage, supervisor, gpu, logs, runtime, config, engine.
"""
