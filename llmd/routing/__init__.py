"""Routing between backends: pools by model name, least load with prefix affinity under a
load bound, sticky canary assignment, one retry before the first byte, and a circuit breaker
for upstreams. Pure: numbers in, decisions out (the proxy and the daemon do the I/O).

May import: validation.
"""
