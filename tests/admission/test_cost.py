"""A request's cost in what the engine runs: seats (prompts x n) and KV tokens (the sum over
prompts of (prompt + max_tokens) x n); and in what token budgets charge: every prompt once,
the output of every sequence."""

from __future__ import annotations

from llmd.admission.cost import Cost, request_cost


def test_seats_and_tokens_count_every_prompt_and_every_sequence() -> None:
    """n = 4 chat: 4 seats, 4 x (prompt + max_tokens); 50 prompts x n = 2: 100 seats, and each
    prompt's own length counts (not the longest one 50 times). The budgets are charged each
    prompt once and max_tokens for each sequence."""
    chat = request_cost([100], 50, 4, rest_of_context=False, max_model_len=1024)
    assert chat == Cost(seats=4, tokens=4 * 150, input_tokens=100, output_tokens=200)
    prompts = [10 * (i + 1) for i in range(50)]
    batch = request_cost(prompts, 20, 2, rest_of_context=False, max_model_len=1024)
    assert batch.seats == 100
    assert batch.tokens == sum((p + 20) * 2 for p in prompts)
    assert (batch.input_tokens, batch.output_tokens) == (sum(prompts), 50 * 20 * 2)


def test_an_omitted_max_tokens_costs_the_engines_default() -> None:
    """The rest of the context (chat, or an explicit null) when max_model_len is known, else
    16 (vLLM 0.32's completions default); per prompt."""
    rest = request_cost([24, 100], None, 1, rest_of_context=True, max_model_len=1024)
    assert rest == Cost(seats=2, tokens=1024 * 2, input_tokens=124, output_tokens=2048 - 124)
    assert request_cost([24], None, 1, rest_of_context=False, max_model_len=1024).tokens == 40
    assert request_cost([24], None, 3, rest_of_context=True, max_model_len=None).tokens == 120
