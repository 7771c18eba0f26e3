"""Sizing a deployment before it runs: what a model's weights and KV cache take, what the
engine settings leave for the KV cache, and the warnings the tuning seeds give about them.

May import: gpu, config, engine.
"""
