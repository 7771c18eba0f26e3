"""`llmd doctor`: the pre-deployment checks (architecture, tokenizer, memory, versions and
instruction set) and the diagnosis of the engine's recent exits, each finding with a hint.

May import: admin, supervisor, sizing, gpu, runtime, arguments, config, engine.
"""
