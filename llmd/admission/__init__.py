"""Admission: who is asking (tenants), how urgent (classes), and when the engine takes it.

`scheduler` and `capacity` are pure (numbers in, decisions out); `controller` is the asyncio glue
the proxy calls, fed the engine's load by the telemetry scraper.
"""
