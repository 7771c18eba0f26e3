"""The fleet: every backend llmd routes to by name (supervised engines' published states,
upstreams' states and probes, a client each) and the engines' model lists read again.
Who joins and leaves is the daemon's (llmd/daemon/backends.py).

May import: admission, routing, supervisor, runtime, config, engine, status.
"""
