"""The engine adapter: how to launch the engine llmd supervises (`vllm` or `sim`).

Nothing outside this package knows which engine kind is running; both speak vLLM's OpenAI API on
a Unix socket.
"""
