"""The API surface: the endpoint table (`table.ENDPOINTS`, the only list of the paths llmd
answers for a backend), a reader per protocol that checks a body's fields into one `Fields`
record, and each protocol's dialect (what its answers tell llmd as they pass).

May import: inflight, admission, validation, telemetry, config, engine.
"""
