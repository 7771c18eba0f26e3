"""The backends llmd sends requests to: supervised engines and upstreams it does not supervise;
their config tables, their supervisors, clients, probes and published state."""
