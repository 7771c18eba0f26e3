"""Telemetry: what llmd measures about its requests, its engine and its GPUs, for the Status
snapshot and Prometheus. Nothing here imports Starlette; the proxy calls in with plain records.
"""
