"""Engine supervision: spawn vLLM in its own process group, watch it, restart it with
backoff, and diagnose why it exited.

`policy`, `exits`, `diagnosis` and `stall` (the stall rule) are pure (numbers and lines in,
decisions out); `process` is the only module in llmd that touches subprocesses and signals to
them.

May import: runtime, config, engine, status.
"""
