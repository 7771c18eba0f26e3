"""What the smoke gate sends: golden prompts (a JSON-lines file named by
`release.golden_prompts`, or the built-in ones) and the fixed texts whose token counts llmd and
the engine must agree on."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from llmd.engine.args import int_flag
from llmd.errors import ReleaseError
from llmd.releases.record import Release
from llmd.textfiles import not_utf8


@dataclasses.dataclass(frozen=True)
class GoldenPrompt:
    """One chat request: `messages` as OpenAI's, `max_tokens` (None: the gate's default)."""

    label: str
    messages: tuple[dict[str, Any], ...]
    max_tokens: int | None = None


BUILTIN_GOLDEN = (
    GoldenPrompt("hello", ({"role": "user", "content": "Say hello to the operator."},)),
    GoldenPrompt("count", ({"role": "user", "content": "Count from one to five."},)),
    GoldenPrompt(
        "system",
        (
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "What is the capital of France?"},
        ),
    ),
)

# Texts llmd and the engine must count alike: plain, multilingual, code, emoji and a chat.
FIXED_TEXTS = (
    ("english", "The quick brown fox jumps over the lazy dog. It was the best of times."),
    ("multilingual", "Grüße aus München! 敏捷的棕色狐狸跳过了懒狗。Привет, как дела? こんにちは"),
    ("code", 'def add(a: int, b: int) -> int:\n    return a + b  # {"ok": true}\n'),
    ("emoji", "Emoji: 😀 👍 🚀 👨‍👩‍👧‍👦 🇫🇷 — “quotes” … ≤ ≥ ∞"),
)
FIXED_CHAT = (
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello, 世界 👋 — how many tokens is this?"},
)


def load_golden(path: str) -> tuple[GoldenPrompt, ...]:
    """The golden prompts of `path` (one JSON object a line: `messages`, optional
    `max_tokens` and `label`; blank lines skipped), or the built-in ones for "".
    Raises ReleaseError naming the line, or the file when it cannot be read or is not UTF-8."""
    if not path:
        return BUILTIN_GOLDEN
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ReleaseError(f"cannot read golden prompts {path}: {exc.strerror or exc}") from exc
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        at, why = not_utf8(data, exc)
        raise ReleaseError(f"{path}:{at}: cannot read golden prompts: {why}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ReleaseError(f"{path}:{number}: not JSON: {exc}") from exc
        messages = item.get("messages") if isinstance(item, dict) else None
        max_tokens = item.get("max_tokens") if isinstance(item, dict) else None
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) for m in messages)
            or not (max_tokens is None or (isinstance(max_tokens, int) and max_tokens > 0))
        ):
            raise ReleaseError(
                f'{path}:{number}: expected {{"messages": [{{"role", "content"}}, ...], '
                '"max_tokens": N (optional)}'
            )
        label = str(item.get("label") or f"line {number}")
        prompts.append(GoldenPrompt(label, tuple(messages), max_tokens))
    if not prompts:
        raise ReleaseError(f"{path}: no golden prompt in it")
    return tuple(prompts)


def pinned_max_model_len(release: Release) -> int | None:
    """The context length the release's args pin (`--max-model-len`, with vLLM's
    human-readable forms: 1k = 1000, 1K = 1024), or None when they pin none."""
    try:
        return int_flag(release.table.args, "--max-model-len")
    except ValueError:  # vLLM refuses it at boot, naming the flag
        return None
