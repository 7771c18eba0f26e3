"""Usage that survives restarts: tokens in and out, requests and outcomes per tenant, model and
hour, and the token budgets' state, kept in SQLite in the state directory.

    records.py   what is kept: a `UsageBatch` gathered on the event loop, `BucketState`
    store.py     `UsageStore`: the SQLite file (stdlib sqlite3, WAL), written in batches
    command.py   `llmd usage`: the kept usage, read without a daemon

May import: config, arguments.
"""
