"""`llmd bench`: load scenarios, a concurrency sweep, the operating point, and the report.

Pure parts (lengths, scenarios, stats) take numbers and return numbers; the network lives in
`client` (one request) and `load` (one step of load); `runner` drives a sweep and `report` shows it.

May import: telemetry, arguments.
"""
