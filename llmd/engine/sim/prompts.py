"""Pooling prompts to token ids, checked as vLLM 0.32 checks them (renderers/params.py
`TokenizeParams`, renderers/base.py `validate_token_ids`, v1/engine/input_processor.py).

Text longer than `max_input_tokens * max_chars_per_token` characters is refused before it is
tokenized (`_text_len_check`); text is tokenized only up to the budget plus one token, so an
over-long one is reported as "at least budget + 1" tokens (`_token_len_check`, 400
`input_tokens`). `truncate_prompt_tokens` (-1: the whole budget) keeps the first N tokens, or
the last N with `truncation_side: left`. The engine then refuses an empty prompt and a token id
outside the vocabulary (400, no `param`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from llmd.engine.sim.errors import SimHTTPError, bad_request, invalid_value
from llmd.engine.sim.tokenizer import SimTokenizer, TemplateError


@dataclasses.dataclass(frozen=True)
class Tokenizing:
    """How one request's prompts are tokenized and limited (vLLM's `TokenizeParams` for a
    pooling request: no output tokens, the whole context for the prompt)."""

    max_input_tokens: int
    add_special_tokens: bool = True
    truncate: int | None = None  # truncate_prompt_tokens; -1 means max_input_tokens
    side: Literal["left", "right"] | None = None  # truncation_side; None: the tokenizer's (right)

    @property
    def keep(self) -> int | None:
        """Tokens kept by truncation (None: no truncation)."""
        if self.truncate is None:
            return None
        return self.max_input_tokens if self.truncate < 0 else self.truncate


def text_ids(tokenizer: SimTokenizer, text: str, how: Tokenizing) -> list[int]:
    """Token ids of one text prompt. Raises `SimHTTPError` 400 when it is too long."""
    limit_chars = how.max_input_tokens * tokenizer.max_chars_per_token
    if how.truncate is None and len(text) > limit_chars:
        raise invalid_value(
            f"This model's maximum context length is {how.max_input_tokens} tokens. However, "
            f"your prompt contains {len(text)} characters (more than {limit_chars} characters, "
            f"which is the upper bound for {how.max_input_tokens} input tokens). Please reduce "
            "the length of the input prompt.",
            "input_text",
            len(text),
        )
    ids = tokenizer.encode(text, add_special_tokens=how.add_special_tokens)
    if how.keep is None:
        ids = ids[: how.max_input_tokens + 1]  # `get_encode_kwargs`: max_length budget + 1
    return _checked(_truncated(ids, how), how)


def token_ids(ids: Sequence[int], how: Tokenizing) -> list[int]:
    """A token-id prompt, truncated and checked. Raises `SimHTTPError` 400 when too long."""
    return _checked(_truncated(list(ids), how), how)


def pair_ids(
    tokenizer: SimTokenizer, first: str, second: str, how: Tokenizing, *, template: bool
) -> list[int]:
    """Token ids of a cross-encoder's pair prompt: the tokenizer's pair `template`, or else
    the two texts joined as one (an LLM reranker); tokenized only up to the budget plus one
    as text is (scoring/io_processor.py `get_score_prompt`). Raises `SimHTTPError` 400 when
    too long."""
    if template:
        ids = tokenizer.encode_pair(first, second)
    else:
        ids = tokenizer.encode(first + second, add_special_tokens=how.add_special_tokens)
    if how.keep is None:
        ids = ids[: how.max_input_tokens + 1]
    return _checked(_truncated(ids, how), how)


def chat_ids(
    tokenizer: SimTokenizer, body: dict[str, Any], messages: list[Any], how: Tokenizing
) -> list[int]:
    """Token ids of a conversation rendered by the chat template with the pooling defaults
    (`add_generation_prompt` and `add_special_tokens` false: base/protocol.py
    `ChatRequestOptionsMixin`). Raises `SimHTTPError` 400."""
    if body.get("chat_template") is not None or (
        isinstance(body.get("chat_template_kwargs"), dict)
        and body["chat_template_kwargs"].get("chat_template") is not None
    ):
        raise bad_request(
            "Chat template is passed with request, but --trust-request-chat-template is not "
            "set. Refused request with untrusted chat template."
        )
    generation = bool(body.get("add_generation_prompt", False))
    if generation and body.get("continue_final_message"):
        raise bad_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{index}] must be an object with a string 'role'")
    try:
        text = tokenizer.render_chat(
            messages,
            add_generation_prompt=generation,
            continue_final_message=bool(body.get("continue_final_message", False)),
            **(body.get("chat_template_kwargs") or {}),
        )
    except TemplateError as exc:
        raise bad_request(str(exc)) from exc
    return text_ids(tokenizer, text, how)


def check_for_engine(ids: Sequence[int], vocab_size: int) -> SimHTTPError | None:
    """What the engine core refuses a rendered prompt for, as vLLM 0.32's input processor:
    an empty prompt, a token id outside `range(vocab_size)` (the larger of the tokenizer's
    and the model's vocabulary). None: it takes it."""
    if not ids:
        return bad_request("The decoder prompt cannot be empty")
    low, high = min(ids), max(ids)
    if low < 0:
        return bad_request(f"Token id {low} is out of vocabulary")
    if high >= vocab_size:
        return bad_request(f"Token id {high} is out of vocabulary")
    return None


def _truncated(ids: list[int], how: Tokenizing) -> list[int]:
    keep = how.keep
    if keep is None or keep >= len(ids):
        return ids
    return ids[len(ids) - keep :] if how.side == "left" else ids[:keep]


def _checked(ids: list[int], how: Tokenizing) -> list[int]:
    limit = how.max_input_tokens
    if len(ids) > limit:
        at_least = "at least " if len(ids) == limit + 1 else ""
        raise invalid_value(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {at_least}{len(ids)} input tokens, which exceeds this limit even without "
            "any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            len(ids),
        )
    return ids
