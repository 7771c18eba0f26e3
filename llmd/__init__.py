"""llmd: a dependable LLM service on one workstation GPU (a supervised vLLM behind a proxy)."""

__version__ = "0.1.0"
