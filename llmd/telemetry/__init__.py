"""Telemetry: what llmd measures about its requests (metrics, windows, outcomes, the request
log line, the usage batch the daemon keeps) for the Status snapshot and Prometheus. Nothing
here imports Starlette; the proxy calls in with plain records.

May import: usage, gpu, logs, config, engine, status.
"""
