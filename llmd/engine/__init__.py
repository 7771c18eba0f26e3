"""The engine adapter: how to launch the engine llmd supervises (`vllm` or `sim`), its flags,
the client to its socket, what its interpreter has installed, and its own metrics read.

Nothing outside this package knows which engine kind is running; both speak vLLM's OpenAI API on
a Unix socket. May import: the base modules only (and `config`'s leaf records).
"""
