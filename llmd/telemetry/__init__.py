"""Telemetry: what llmd measures about its requests (metrics, windows, outcomes, the request
log line) for the Status snapshot and Prometheus. Nothing here imports Starlette; the proxy
calls in with plain records.

May import: gpu, config, engine, status.
"""
