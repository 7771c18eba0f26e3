"""Releases: immutable records of what an engine serves (weights, tokenizer, engine flags,
versions), their store in the state directory, and the pure cores of a deploy: the smoke gate's
checks, the canary comparison rule, sticky canary assignment and the deploy state machine."""
