"""Prompt texts of a target token length."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llmd.bench.prompts import PromptBuilder
from llmd.errors import BenchError
from tests.support.model import ensure_tiny_model


def test_prompts_have_the_exact_token_count_with_the_tokenizer() -> None:
    """With the model's tokenizer, a prompt has exactly the asked tokens (BOS included)."""
    builder = PromptBuilder(ensure_tiny_model())
    assert builder.exact
    for tokens in (1, 2, 7, 64, 333, 1000):
        for seed in range(3):
            assert builder.count(builder.build(tokens, random.Random(seed))) == tokens


def test_prompts_differ_from_the_first_words() -> None:
    """Two requests' prompts share no prefix to speak of (the prefix cache cannot help)."""
    builder = PromptBuilder(None)
    a, b = builder.build(200, random.Random(1)), builder.build(200, random.Random(2))
    assert a[:20] != b[:20]


def test_missing_tokenizer_is_a_bench_error(tmp_path: Path) -> None:
    """A directory without tokenizer.json is refused by name."""
    with pytest.raises(BenchError, match=r"no tokenizer\.json"):
        PromptBuilder(tmp_path)


def test_a_shared_prefix_starts_every_prompt_and_the_count_stays_exact() -> None:
    """With a prefix the prompt starts with it and still has exactly the asked tokens."""
    builder = PromptBuilder(ensure_tiny_model())
    prefix = builder.build(64, random.Random("system"))
    for seed in range(5):
        prompt = builder.build(90, random.Random(seed), prefix)
        assert prompt.startswith(prefix + " ")
        assert builder.count(prompt) == 90
