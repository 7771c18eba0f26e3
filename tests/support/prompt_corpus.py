# ruff: noqa: RUF001 (the corpus is full-width punctuation and symbols on purpose)
"""Prompts for token-count parity: chat and completions bodies over varied scripts, special
tokens, roles and flags (the real engine's parity tests and the file reader's against
transformers count the same corpus)."""

from __future__ import annotations

import random
from typing import Any

TEXTS = [
    "", " ", "\n", "hi", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "héllo wörld — “quotes” … naïve café", "Привет, как дела?", "مرحبا بالعالم",
    "你好，世界！今天天气很好。", "日本語のテキストです。カタカナ", "안녕하세요, 세계!",
    "😀🚀🔥 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷", "∀x ∈ ℝ: x² ≥ 0", "tab\tand\r\nCRLF  double  spaces ",
    "<s>", "</s>", "<|user|>", "<|assistant|>\n</s><s>", "<pad><unk>",
    "def f(x):\n    return {'a': [1, 2]}\n", "SELECT * FROM t WHERE x = 'y';",
    "a" * 700, "word " * 150, "🙂" * 120, "中" * 300,
]  # fmt: skip


def chat_corpus() -> list[dict[str, Any]]:
    """Chat bodies: single turns, system + multi-turn, text-part arrays, roles, flags."""
    rng = random.Random(7)
    bodies: list[dict[str, Any]] = []
    for text in TEXTS:
        bodies.append({"messages": [{"role": "user", "content": text}]})
        bodies.append(
            {"messages": [{"role": "system", "content": rng.choice(TEXTS)},
                          {"role": "user", "content": text}]}
        )  # fmt: skip
        parts = [{"type": "text", "text": text}, {"type": "text", "text": rng.choice(TEXTS)}]
        bodies.append({"messages": [{"role": "user", "content": parts}]})
    for i in range(130):
        turns: list[dict[str, Any]] = [{"role": "system", "content": rng.choice(TEXTS)[:200]}]
        for _ in range(rng.randint(1, 4)):
            turns.append({"role": "user", "content": rng.choice(TEXTS)[:150]})
            turns.append({"role": "assistant", "content": rng.choice(TEXTS)[:150]})
        turns.append({"role": "user", "content": rng.choice(TEXTS)[:150]})
        body: dict[str, Any] = {"messages": turns}
        if i % 5 == 1:
            body["add_generation_prompt"] = False
        if i % 5 == 2:
            body["add_special_tokens"] = True
        if i % 5 == 3:
            turns[0]["role"] = "developer"
        if i % 5 == 4:
            turns[1]["name"] = "ann"
            turns[2]["content"] = None
        if i % 7 == 0:
            parts = [
                {"type": "input_text", "text": "x"},
                {"type": "text", "text": rng.choice(TEXTS)},
            ]
            turns[-1] = {"role": "user", "content": parts}
        if i % 11 == 0:
            turns.append({"role": "tool", "content": "result", "tool_call_id": "c1"})
        if i % 13 == 0:
            turns.append({"role": "user"})
        bodies.append(body)
    return bodies


def completion_corpus() -> list[dict[str, Any]]:
    """Completions bodies: strings with and without special tokens."""
    bodies: list[dict[str, Any]] = [{"prompt": text} for text in TEXTS if text]
    bodies += [{"prompt": text, "add_special_tokens": False} for text in TEXTS if text]
    return bodies
