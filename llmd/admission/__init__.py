"""Admission: who is asking (tenants), how urgent (classes), and when a backend takes it.

`scheduler`, `capacity`, `cost`, `guard` and `sharing` are pure (numbers in, decisions out);
`pools` holds each backend's gate, grouped by model; `waiters` is the asyncio side the proxy
calls.

May import: routing, telemetry, supervisor, config, engine, status.
"""
