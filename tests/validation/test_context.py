"""The pure context check: reject or clamp, the prompt-alone rule, output defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmd.config import ValidationConfig
from llmd.engine.versions import EngineApi
from llmd.errors import ContextLengthExceeded, InvalidRequest
from llmd.validation.context import ContextDecision, check_context, fit_output
from llmd.validation.fields import NO_OUTPUT, OutputRequest

CHAT, COMPLETIONS = "chat", "completions"
DEFAULTS = ValidationConfig()


def check(
    endpoint: str, prompts: list[int], output: OutputRequest, *args: Any, **kwargs: Any
) -> ContextDecision:
    """`check_context` as the chat or completions reader sets it up: the prompt's field, and
    completions' default of 16 when max_tokens is omitted (llmd/endpoints/openai.py)."""
    if endpoint == COMPLETIONS and output.omitted:
        output = dataclasses.replace(output, engine_default=16)
    param = "messages" if endpoint == CHAT else "prompt"
    return check_context(prompts, output, *args, prompt_param=param, **kwargs)


def out(
    max_tokens: int | None, field: str = "max_tokens", n: int = 1, *, null: bool = False
) -> OutputRequest:
    """The output request; `out(None)` is an omitted field, `out(None, null=True)` a null."""
    return OutputRequest(
        max_tokens=max_tokens, field=field, n=n, omitted=max_tokens is None and not null
    )


def test_exact_fit_passes_unchanged() -> None:
    """prompt + max_tokens == max_model_len fits and changes nothing."""
    decision = check(CHAT, [1000], out(24), 1024, DEFAULTS, "reject")
    assert decision.max_tokens is None and decision.clamped_from is None


def test_one_token_over_is_rejected_with_the_numbers() -> None:
    """One token over: 400 context_length_exceeded giving prompt, request, limit and what fits."""
    with pytest.raises(ContextLengthExceeded) as caught:
        check(CHAT, [1000], out(25), 1024, DEFAULTS, "reject")
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "max_tokens")
    for number in ("1024", "1000", "25", "1025", "at most 24"):
        assert number in error.message


def test_clamp_lowers_max_tokens_and_remembers_the_original() -> None:
    """Under `clamp` the request is fitted: max_tokens lowered to the room left."""
    decision = check(CHAT, [1000], out(500), 1024, DEFAULTS, "clamp")
    assert (decision.max_tokens, decision.clamped_from, decision.field) == (24, 500, "max_tokens")


def test_clamp_keeps_the_field_the_client_used() -> None:
    """A clamp of max_completion_tokens writes max_completion_tokens."""
    decision = check(CHAT, [10], out(2000, "max_completion_tokens"), 1024, DEFAULTS, "clamp")
    assert (decision.field, decision.max_tokens) == ("max_completion_tokens", 1014)


@pytest.mark.parametrize("policy", ["reject", "clamp"])
@pytest.mark.parametrize("prompt", [1024, 1025, 5000])
def test_prompt_too_long_on_its_own_is_always_400(policy: str, prompt: int) -> None:
    """A prompt that leaves no room for one output token is refused under either policy."""
    with pytest.raises(ContextLengthExceeded) as caught:
        check(COMPLETIONS, [prompt], out(None), 1024, DEFAULTS, policy)  # type: ignore[arg-type]
    assert caught.value.param == "prompt"
    assert "1023" in caught.value.message


def test_longest_prompt_decides_for_several_prompts() -> None:
    """With several completion prompts, each is its own sequence: the longest must fit."""
    check(COMPLETIONS, [10, 1000], out(24), 1024, DEFAULTS, "reject")
    with pytest.raises(ContextLengthExceeded):
        check(COMPLETIONS, [10, 1001], out(24), 1024, DEFAULTS, "reject")


def test_n_does_not_shrink_the_room() -> None:
    """n sequences of one prompt are each checked alone (vLLM 0.32), so n does not matter."""
    check(CHAT, [1000], out(24, n=8), 1024, DEFAULTS, "reject")


def test_omitted_max_tokens_gets_the_configured_default_fitted() -> None:
    """An omitted max_tokens gets default_max_tokens, lowered to the room when needed."""
    config = ValidationConfig(default_max_tokens=256)
    assert check(CHAT, [10], out(None), 1024, config, "reject").max_tokens == 256
    assert check(CHAT, [900], out(None), 1024, config, "reject").max_tokens == 124
    assert check(COMPLETIONS, [10], out(None), 1024, config, "reject").max_tokens is None
    null = out(None, null=True)  # vLLM 0.32 completions read null as the rest of the context
    assert check(COMPLETIONS, [10], null, 1024, config, "reject").max_tokens == 256


def test_omitted_max_tokens_without_default_is_left_to_the_engine() -> None:
    """Without a default, chat leaves max_tokens out (vLLM uses the rest of the context)."""
    config = ValidationConfig(default_max_tokens=0)
    assert check(CHAT, [10], out(None), 1024, config, "reject").max_tokens is None


def test_shipped_default_bounds_chat_output() -> None:
    """By default an omitted chat max_tokens is 2048, fitted to the room: never the whole
    context of a long-context model."""
    assert check(CHAT, [10], out(None), 32768, DEFAULTS, "reject").max_tokens == 2048
    assert check(CHAT, [10], out(None), 1024, DEFAULTS, "reject").max_tokens == 1014


def test_completions_engine_default_that_does_not_fit_is_fitted() -> None:
    """Completions default to 16 tokens in vLLM; when 16 do not fit llmd writes what does."""
    assert check(COMPLETIONS, [1000], out(None), 1024, DEFAULTS, "reject").max_tokens is None
    assert check(COMPLETIONS, [1020], out(None), 1024, DEFAULTS, "reject").max_tokens == 4


def test_max_tokens_limit_caps_requests() -> None:
    """Over max_tokens_limit: 400 invalid_request under reject, lowered under clamp."""
    config = ValidationConfig(max_tokens_limit=100)
    with pytest.raises(InvalidRequest) as caught:
        check(CHAT, [10], out(500), 1024, config, "reject")
    assert caught.value.code == "invalid_request" and "100" in caught.value.message
    assert check(CHAT, [10], out(500), 1024, config, "clamp").max_tokens == 100
    assert check(CHAT, [10], out(None), 1024, config, "reject").max_tokens == 100


def test_truncate_prompt_tokens_counts_the_truncated_prompt() -> None:
    """truncate_prompt_tokens shortens the prompt first, as vLLM does (-1: context less one)."""
    check(COMPLETIONS, [5000], out(24), 1024, DEFAULTS, "reject", truncate_prompt_tokens=1000)
    check(COMPLETIONS, [5000], out(1), 1024, DEFAULTS, "reject", truncate_prompt_tokens=-1)
    with pytest.raises(InvalidRequest):
        check(COMPLETIONS, [5], out(1), 1024, DEFAULTS, "reject", truncate_prompt_tokens=2000)


V031 = EngineApi((0, 31))


def test_truncation_follows_the_engines_release() -> None:
    """truncate_prompt_tokens -1 on a 2,000-token prompt asking 100: vLLM 0.32 keeps 1,023
    prompt tokens (1 left: reject), 0.31 keeps 924 (the 100 fit); a bound over the limit is
    refused in each release's words."""
    with pytest.raises(ContextLengthExceeded):
        check(COMPLETIONS, [2000], out(100), 1024, DEFAULTS, "reject", -1)
    decision = check(COMPLETIONS, [2000], out(100), 1024, DEFAULTS, "reject", -1, V031)
    assert decision.max_tokens is None
    assert check(COMPLETIONS, [2000], out(100), 1024, DEFAULTS, "reject", 924, V031) == (decision)
    with pytest.raises(InvalidRequest, match=r"than max_model_len - max_tokens = 924\."):
        check(COMPLETIONS, [2000], out(100), 1024, DEFAULTS, "reject", 925, V031)
    with pytest.raises(InvalidRequest, match=r"than max_model_len = 1024\."):
        check(COMPLETIONS, [2000], out(100), 1024, DEFAULTS, "reject", 1025)


def test_a_pooling_input_must_fit_alone_and_the_first_over_is_named() -> None:
    """A pooling request (no output) fits when each input is at most max_model_len; the first
    input over it is named by its index, with its count; truncation to -1 keeps the whole
    context (vLLM 0.32 renderers/params.py)."""
    assert check_context([1024, 10], NO_OUTPUT, 1024, DEFAULTS, "reject", prompt_param="input") == (
        ContextDecision()
    )
    with pytest.raises(ContextLengthExceeded) as caught:
        check_context([10, 1025, 2000], NO_OUTPUT, 1024, DEFAULTS, "clamp", prompt_param="input")
    assert caught.value.param == "input"
    assert "input[1]" in caught.value.message and "1025" in caught.value.message
    with pytest.raises(ContextLengthExceeded) as alone:
        check_context([1025], NO_OUTPUT, 1024, DEFAULTS, "reject", prompt_param="input")
    assert "your input contains 1025 input tokens" in alone.value.message
    with pytest.raises(ContextLengthExceeded) as plural:  # a field named in the plural
        check_context([1025], NO_OUTPUT, 1024, DEFAULTS, "reject", prompt_param="messages")
    assert "your messages contain 1025 input tokens" in plural.value.message
    check_context([5000], NO_OUTPUT, 1024, DEFAULTS, "reject", -1, prompt_param="input")
    with pytest.raises(InvalidRequest):
        check_context([5], NO_OUTPUT, 1024, DEFAULTS, "reject", 1025, prompt_param="input")


def test_fit_output_lowers_only_a_limit_that_may_be_lowered() -> None:
    """An output limit past the tenant's budget room is lowered to the room over its sequences
    under `clamp`, or when the client sent none (the engine's default, the rest of the
    context); a limit the client set under `reject`, one that fits, and a room of less than a
    token a sequence are left as they are (admission refuses those)."""
    sent = OutputRequest(max_tokens=32000, field="max_tokens", n=1)
    assert fit_output([100], sent, 32000, 8000, 65536, "clamp") == 8000
    assert fit_output([100], sent, 32000, 8000, 65536, "reject") is None
    assert fit_output([100], sent, 32000, None, 65536, "clamp") is None
    assert fit_output([100], sent, 5000, 8000, 65536, "clamp") is None
    two = OutputRequest(max_tokens=None, field="max_tokens", n=2)
    assert fit_output([100, 50], two, None, 8000, 65536, "reject") == 2000  # 4 sequences
    assert fit_output([100, 50], two, None, 3, 65536, "reject") is None
    pooled = OutputRequest(max_tokens=0, field="", n=1, generates=False)
    assert fit_output([100], pooled, 0, 10, 65536, "clamp") is None
