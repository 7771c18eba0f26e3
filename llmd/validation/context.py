"""The context-length check: pure, over numbers. Does prompt + requested output fit?

- A generation's sequences each need their prompt plus their output within `max_model_len`.
  With `n` > 1 vLLM 0.32 checks each of the n sequences of a prompt on its own
  (`get_max_tokens`), so `n` does not shrink the room; of several prompts the longest decides.
- A pooling request (no output) needs each input within `max_model_len`: the first input over
  it is named (vLLM 0.32 renderers/params.py `_token_len_check`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from llmd.config import ValidationConfig
from llmd.engine.versions import ASSUMED, EngineApi
from llmd.errors import ContextLengthExceeded, InvalidRequest
from llmd.validation.fields import OutputRequest

Policy = Literal["reject", "clamp"]


class AtLeast(int):
    """A prompt token count where counting stopped early (the text is longer than any prompt
    that fits could be): the true count is at least this. An int everywhere else, so the
    check treats it as the count it bounds; only the refusal's wording differs."""


@dataclasses.dataclass(frozen=True)
class ContextDecision:
    """What to change in the request: `max_tokens` to write into `field` (None: nothing), and
    `clamped_from` (the client's own value, when llmd lowered it).
    """

    max_tokens: int | None = None
    field: str = "max_tokens"
    clamped_from: int | None = None


def check_context(
    prompt_tokens: list[int],
    output: OutputRequest,
    max_model_len: int,
    config: ValidationConfig,
    policy: Policy,
    truncate_prompt_tokens: int | None = None,
    api: EngineApi = ASSUMED,
    prompt_param: str = "prompt",
) -> ContextDecision:
    """Decide the output budget of a request whose sequences have `prompt_tokens` each
    (`prompt_param`: the request field that holds the prompts, named in a refusal).

    A prompt that leaves no room for one output token is always refused (an `AtLeast` count
    is named as such). Over the room (or
    over `config.max_tokens_limit`), `reject` raises and `clamp` lowers max_tokens. An omitted
    max_tokens gets `config.default_max_tokens`, fitted to the room. `truncate_prompt_tokens`
    cuts the prompt as the engine's release (`api`) will.
    Raises ContextLengthExceeded (the context) or InvalidRequest (the operator's limit).
    """
    if not output.generates:
        _check_inputs(prompt_tokens, max_model_len, truncate_prompt_tokens, prompt_param)
        return ContextDecision()
    prompt = _effective_prompt(
        max(prompt_tokens), max_model_len, truncate_prompt_tokens, output, api
    )
    room = max_model_len - prompt
    if room < 1:
        size = f"at least {prompt} tokens" if isinstance(prompt, AtLeast) else f"{prompt} tokens"
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt is {size}, which leaves no room for output. Reduce the prompt "
            f"to at most {max_model_len - 1} tokens.",
            param=prompt_param,
        )
    ceiling = min(room, config.max_tokens_limit) if config.max_tokens_limit else room
    requested = output.max_tokens
    if requested is None:
        return _default(output, ceiling, config)
    if requested <= ceiling:
        return ContextDecision()
    if policy == "clamp":
        return ContextDecision(max_tokens=ceiling, field=output.field, clamped_from=requested)
    if requested > room:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt + requested} tokens ({prompt} in the prompt, {requested} for "
            f"the output). Set {output.field} to at most {ceiling}, or shorten the prompt.",
            param=output.field,
        )
    raise InvalidRequest(
        f"{output.field}={requested} is over this server's limit of "
        f"{config.max_tokens_limit} output tokens; set {output.field} to at most {ceiling}.",
        param=output.field,
    )


def _effective_prompt(
    prompt: int, max_model_len: int, truncate: int | None, output: OutputRequest, api: EngineApi
) -> int:
    """The prompt length after vLLM's `truncate_prompt_tokens`: at most `max_model_len` (-1:
    the context less one) in 0.32; at most `max_model_len - max_tokens` (-1: that many) in 0.31,
    with its own wording for a bound too large (renderers/params.py `TokenizeParams`)."""
    if truncate is None:
        return prompt
    if api.truncation_keeps_room_for_output:
        bound = max_model_len - (output.max_tokens or 0)
        over = f"max_model_len - {output.field} = {bound}"
        keep = bound
    else:
        bound, over, keep = max_model_len, f"max_model_len = {max_model_len}", max_model_len - 1
    if truncate > bound:
        raise InvalidRequest(
            f"truncate_prompt_tokens={truncate} cannot be greater than {over}. "
            "Please request a smaller truncation size.",
            param="truncate_prompt_tokens",
        )
    return min(prompt, keep if truncate == -1 else truncate)


def _check_inputs(
    prompt_tokens: list[int], max_model_len: int, truncate: int | None, param: str
) -> None:
    """Each pooling input within `max_model_len` after `truncate_prompt_tokens` (-1: the
    context; vLLM 0.32 keeps pooling's whole context, `max_truncation_tokens`). Raises
    InvalidRequest for a truncation past the context, ContextLengthExceeded naming the first
    input over it (its index when there are several)."""
    if truncate is not None and truncate > max_model_len:
        raise InvalidRequest(
            f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len = "
            f"{max_model_len}. Please request a smaller truncation size.",
            param="truncate_prompt_tokens",
        )
    for index, count in enumerate(prompt_tokens):
        tokens = (
            count if truncate is None else min(count, max_model_len if truncate == -1 else truncate)
        )
        if tokens <= max_model_len:
            continue
        which = f"{param}[{index}] contains"  # one input; else the field, as vLLM words it
        if len(prompt_tokens) == 1:
            which = f"your {param} {'contain' if param.endswith('s') else 'contains'}"
        size = f"at least {tokens}" if isinstance(tokens, AtLeast) else f"{tokens}"
        raise ContextLengthExceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, {which} "
            f"{size} input tokens, which exceeds this limit even without any output "
            "tokens. Please reduce the length of the input.",
            param=param,
        )


def _default(output: OutputRequest, ceiling: int, config: ValidationConfig) -> ContextDecision:
    """max_tokens for a request that omits it (or sends null), fitted to `ceiling`.

    Completions that omit it keep the OpenAI and vLLM default of 16 (`output.engine_default`).
    Where vLLM 0.32 would take the rest of the context (chat, or an explicit null), the
    configured default applies, unless the endpoint opts out (`output.configured_default`:
    Responses); without one the engine's does. llmd writes a value only when it differs from
    what the engine would do, or when that would not fit.
    """
    field = output.field
    engine_default = output.engine_default
    if engine_default is None and config.default_max_tokens and output.configured_default:
        return ContextDecision(max_tokens=min(config.default_max_tokens, ceiling), field=field)
    if engine_default is None and config.max_tokens_limit:
        return ContextDecision(max_tokens=ceiling, field=field)
    if engine_default is not None and engine_default > ceiling:
        return ContextDecision(max_tokens=ceiling, field=field)
    return ContextDecision()


def fit_output(
    counts: list[int],
    output: OutputRequest,
    max_tokens: int | None,
    room: int | None,
    max_model_len: int | None,
    policy: Policy,
) -> int | None:
    """The max_tokens to write so that the request's output over all its sequences (`n` per
    prompt of `counts`) fits `room` (the most output its tenant's token budgets could ever
    hold, `Budgets.output_room`), when its output limit (`max_tokens` after the context
    check; None: the engine's default) is over it and may be lowered: under the `clamp`
    policy, or a limit the client left to llmd (none sent). None: nothing to change (it
    fits, or the room holds not one token a sequence: admission refuses it, 400)."""
    if room is None or not output.generates:
        return None
    if policy != "clamp" and output.max_tokens is not None:
        return None
    per_sequence = room // (max(output.n, 1) * max(len(counts), 1))
    limit = output_limit(counts, output, max_tokens, max_model_len)
    if per_sequence < 1 or (limit is not None and limit <= per_sequence):
        return None
    return per_sequence


def output_limit(
    counts: list[int], output: OutputRequest, max_tokens: int | None, max_model_len: int | None
) -> int | None:
    """The most output tokens a sequence of the request may get: `max_tokens` (after the
    context check), else the engine's default, else the rest of the context after the
    shortest prompt of `counts` (None: the context is unknown)."""
    limit = max_tokens if max_tokens is not None else output.engine_default
    if limit is None and max_model_len is not None:
        limit = max(max_model_len - min(counts, default=0), 0)
    return limit
