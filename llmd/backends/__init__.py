"""The backends llmd sends requests to: supervised engines and upstreams it does not supervise;
their config tables, their clients, probes and published state."""
