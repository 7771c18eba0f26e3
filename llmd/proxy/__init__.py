"""The public HTTP proxy: the routes relayed to a backend in named stages, health and
readiness. The only package in llmd that imports Starlette; the relay hot path is pure ASGI.

May import: state, endpoints, inflight, admission, routing, validation, config, engine.
"""
