"""A vLLM-compatible simulator engine: the OpenAI surface, metrics and errors of vLLM 0.32 over a
timing and KV model of continuous batching, with fault injection, as a generate, pooling
(`--runner pooling`) or speech (`--sim-asr`) model. Run as
`python -m llmd.engine.sim --model DIR --uds SOCKET`; it imports no torch, transformers or vLLM.
"""
