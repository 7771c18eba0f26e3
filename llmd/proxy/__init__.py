"""The public HTTP proxy: OpenAI routes relayed to the engine, health and readiness.

The only package in llmd that imports Starlette. The relay hot path is pure ASGI.
"""
