"""Admission: who is asking (tenants), how urgent (classes), and when a backend takes it.

`scheduler`, `capacity`, `cost`, `guard`, `sharing` (the device hold), `shares` (each
tenant's share of the KV cache), `buckets` and `budgets` (token budgets that refill) and
`pacing` (batch into an engine at the rate it takes requests in) are pure (numbers in,
decisions out); `pools` holds each backend's gate, grouped by model; `charges` turns a
budget's answer into what the client is told; `lanes` lets batch requests through llmd's own
work a few per pass of the event loop; `control` is the asyncio side the proxy calls.

May import: routing, telemetry, usage, supervisor, config, engine, status.
"""
