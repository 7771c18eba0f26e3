"""A cheap upper bound of a text's token count, for the tokenizers where one provably holds:
a text whose bound fits the window needs no tokenizing to pass the context check.

The bound is the text's UTF-8 bytes plus what the tokenizer adds whatever the text (its
special tokens, a prefix space). It holds for a BPE model (Hugging Face `tokenizers`, as
vLLM 0.32 and transformers 5 load it) because each of its tokens covers at least one symbol
it started from, and the symbols are the normalized text's characters (or, with a ByteLevel
pre-tokenizer or `byte_fallback`, its bytes: a character is 1-4 bytes); the pre-tokenizers
allowed below only split or drop text, and an added token matched in the text covers at
least one character of it. A normalizer may change a text's length: the ones allowed leave
ASCII text as it is (Unicode normal forms, case, accents, stripping), so under one the bound
covers ASCII texts only. Anything else (Metaspace, Replace, Prepend, Unigram, WordPiece, a
tokenizer without a `tokenizers` backend): no bound, the text is tokenized.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

# Pre-tokenizers that only split text (or drop whitespace): the symbols stay the text's own.
_SPLITTERS = frozenset(
    {"ByteLevel", "Split", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits",
     "UnicodeScripts", "CharDelimiterSplit"}
)  # fmt: skip
# Normalizers that leave an ASCII text's length as it is (or shorten it).
_ASCII_KEEPING = frozenset(
    {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents"}
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ByteBound:
    """Tokens of a text <= its UTF-8 bytes + `extra` (+ `specials` when special tokens are
    added); `ascii_only`: the bound is known for ASCII texts only (a normalizer may grow
    others)."""

    extra: int
    specials: int
    ascii_only: bool

    def of(self, text: str, add_special_tokens: bool) -> int | None:
        """The bound of `text` (None: none known for it)."""
        if self.ascii_only and not text.isascii():
            return None
        return len(text.encode()) + self.extra + (self.specials if add_special_tokens else 0)


def byte_bound(tokenizer: Any) -> ByteBound | None:
    """The bound of a transformers-like `tokenizer` (its `backend_tokenizer`, a `tokenizers`
    Tokenizer; its call on "" gives the special tokens it adds), or None where none is proven
    (see the module)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        spec = json.loads(backend.to_str())
    except Exception:  # the Rust tokenizer's serialisation errors are plain Exceptions
        return None
    if (spec.get("model") or {}).get("type") != "BPE":
        return None
    extra = _pre_tokenizer_extra(spec.get("pre_tokenizer"))
    normalizers = _normalizers(spec.get("normalizer"))
    if extra is None or normalizers is None or not normalizers <= _ASCII_KEEPING:
        return None
    specials = len(tokenizer("", add_special_tokens=True)["input_ids"])
    specials -= len(tokenizer("", add_special_tokens=False)["input_ids"])
    post = backend.post_processor
    if post is not None:
        specials = max(specials, post.num_special_tokens_to_add(False))
    return ByteBound(extra, max(specials, 0), ascii_only=bool(normalizers))


def _pre_tokenizer_extra(spec: dict[str, Any] | None) -> int | None:
    """Bytes a pre-tokenizer may add to a text (a ByteLevel prefix space: 1), None when it is
    not one that only splits."""
    if spec is None:
        return 0
    if spec.get("type") == "Sequence":
        parts = [_pre_tokenizer_extra(part) for part in spec.get("pretokenizers", [])]
        return None if None in parts else sum(p for p in parts if p is not None)
    if spec.get("type") not in _SPLITTERS:
        return None
    return 1 if spec.get("type") == "ByteLevel" and spec.get("add_prefix_space") else 0


def _normalizers(spec: dict[str, Any] | None) -> set[str] | None:
    """The normalizer's kinds (a Sequence's, flattened); None for a shape not known here."""
    if spec is None:
        return set()
    if spec.get("type") == "Sequence":
        kinds: set[str] = set()
        for part in spec.get("normalizers", []):
            found = _normalizers(part)
            if found is None:
                return None
            kinds |= found
        return kinds
    kind = spec.get("type")
    return {kind} if isinstance(kind, str) else None
