"""Releases: immutable records of what an engine serves (weights, tokenizer, engine flags,
versions), their store in the state directory, the pure cores of a deploy (smoke checks, the
canary comparison, the state machine) and their execution on the daemon (a `DeployHost`).

May import: state, endpoints, routing, validation, telemetry, supervisor, arguments, config,
engine.
"""
