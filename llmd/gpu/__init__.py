"""The GPUs through NVML (pynvml): readings per device, and the preflight check before vLLM
starts.

May import: config, engine.
"""
