"""Request validation before a request costs anything: field types, exact prompt token
counts and the context-length policy (reject or clamp), and output-token defaults.

May import: config, engine.
"""
