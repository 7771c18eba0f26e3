"""The GPU through NVML (pynvml): the preflight check before vLLM starts."""
