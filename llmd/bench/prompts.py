"""Prompt texts of a target token length: exact with the model's tokenizer, else approximate.

Every prompt is a fresh random run of common words (seeded per request), so no two requests share
a prefix and the engine's prefix cache cannot make the load look lighter than it is; unless the
scenario gives them one shared prefix on purpose (G, a chat app's system prompt).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from llmd.errors import BenchError

_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her they this which be or are"
    " an had not but have it were all one their there been has when who would more will its if"
    " no into out up about time only new some could these two may first then do any like my now"
    " over such our man me even most made after also did many before must through back years"
    " where much your way well down should because each just those people how too little state"
    " good very make world still own see men work long get here between both life being under"
    " never day same another know while last might us great old year off come since against go"
    " came right used take three small river garden window letter morning music city water"
)
WORDS = tuple(_WORD_TEXT.split())

# Without the model's tokenizer: English words average about 1.3 tokens in BPE vocabularies of
# 30-150k entries (OpenAI's tokenizer notes: ~0.75 words per token). Small vocabularies split more;
# the report always gives the prompt tokens the engine counted (usage), not this guess.
TOKENS_PER_WORD = 1.3


class PromptBuilder:
    """Builds prompt texts; `exact` tells whether token counts are the tokenizer's own."""

    def __init__(self, tokenizer_dir: Path | None) -> None:
        self._tok: Any = None
        if tokenizer_dir is not None:
            path = tokenizer_dir / "tokenizer.json"
            if not path.exists():
                raise BenchError(f"no tokenizer.json in {tokenizer_dir}")
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise BenchError(
                    "--tokenizer needs the `tokenizers` package (installed with vLLM)"
                ) from None
            self._tok = Tokenizer.from_file(str(path))

    @property
    def exact(self) -> bool:
        return self._tok is not None

    def count(self, text: str) -> int:
        """Tokens of `text` as a completion prompt (special tokens included). Needs a tokenizer."""
        assert self._tok is not None
        return len(self._tok.encode(text, add_special_tokens=True).ids)

    def build(self, tokens: int, rng: random.Random, prefix: str = "") -> str:
        """A prompt of `tokens` tokens (exact with a tokenizer, within one or two otherwise),
        starting with `prefix` (itself shorter than `tokens`) when one is given."""
        lead = prefix + " " if prefix else ""
        if self._tok is None:
            own = tokens - round(len(prefix.split()) * TOKENS_PER_WORD) if prefix else tokens
            return lead + _words(rng, max(1, round(own / TOKENS_PER_WORD)))
        text = lead + _words(rng, max(1, tokens - (self.count(lead) if prefix else 0)) + 8)
        for _ in range(6):
            encoding = self._tok.encode(text, add_special_tokens=True)
            count = len(encoding.ids)
            if count == tokens:
                return text
            if count < tokens:
                text += " " + _words(rng, tokens - count)
                continue
            # Cut after token `tokens - 1` (special tokens have empty spans at the edges).
            end = max((span[1] for span in encoding.offsets[:tokens] if span[1] > 0), default=0)
            text = text[:end]
        return text


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choices(WORDS, k=count))
