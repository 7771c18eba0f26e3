"""What one request costs the engine, in what the engine runs: sequences and KV tokens. Pure.
One rule per kind of request: generation (`request_cost`), pooling, scored pairs.

vLLM 0.32 runs every prompt of a completions request as a request of its own, and `n`
sequences for each prompt (chat has one prompt). Each sequence may hold its prompt plus its
output in the KV cache, so a request takes `prompts x n` seats of the engine's
`--max-num-seqs` and reserves, summed over its prompts, `(prompt + max_tokens) x n` tokens. (An
upper bound: with prefix caching the n sequences of one prompt share its full blocks.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.engine.args import COMPLETIONS_DEFAULT_MAX_TOKENS


@dataclasses.dataclass(frozen=True)
class Cost:
    """A request's `seats` (sequences it runs at once) and `tokens` (KV tokens it may hold);
    what it is charged to its tenant's token budgets (llmd/admission/budgets.py): its
    `input_tokens` (every prompt once, as counted) and the `output_tokens` it may produce
    (over every sequence)."""

    seats: int
    tokens: int
    input_tokens: int = 0
    output_tokens: int = 0


def request_cost(
    prompt_tokens: Sequence[int],
    max_tokens: int | None,
    n: int,
    *,
    rest_of_context: bool,
    max_model_len: int | None,
) -> Cost:
    """The cost of a request whose prompts have `prompt_tokens` each, asking `max_tokens` per
    sequence and `n` sequences per prompt. `max_tokens` None is the engine's default: the rest
    of the context when `rest_of_context` (chat, or completions with an explicit null) and
    `max_model_len` is known, else 16 (vLLM 0.32's completions default)."""
    prompts = list(prompt_tokens) or [0]
    sequences = max(n, 1)
    tokens = outputs = 0
    for prompt in prompts:
        output = max_tokens
        if output is None:
            rest = max(max_model_len - prompt, 0) if max_model_len else None
            output = (
                rest if rest_of_context and rest is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
            )
        tokens += (prompt + output) * sequences
        outputs += output * sequences
    return Cost(
        seats=len(prompts) * sequences,
        tokens=max(1, tokens),
        input_tokens=sum(prompts),
        output_tokens=outputs,
    )


def pooling_cost(prompt_tokens: Sequence[int]) -> Cost:
    """The cost of a pooling request (embeddings, pooling, classify) whose inputs have
    `prompt_tokens` each: one sequence per input, holding its prompt and no output."""
    counts = list(prompt_tokens) or [0]
    return Cost(seats=len(counts), tokens=max(1, sum(counts)), input_tokens=sum(counts))


def pair_cost(text_tokens: Sequence[int], pairs: Sequence[tuple[int, int]]) -> Cost:
    """The cost of scoring `pairs` (indexes into texts of `text_tokens` tokens each, all 0
    when not counted here): one sequence per pair, both its texts' tokens."""
    tokens = sum(
        (text_tokens[left] if left < len(text_tokens) else 0)
        + (text_tokens[right] if right < len(text_tokens) else 0)
        for left, right in pairs
    )
    return Cost(seats=max(1, len(pairs)), tokens=max(1, tokens), input_tokens=tokens)
