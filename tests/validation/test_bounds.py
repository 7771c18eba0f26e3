"""The byte bound of a text's tokens (`bounds.byte_bound`): never below the tokenizer's own count
for the tokenizers it is given for (the tiny model's, byte-level BPE read from its files and by
transformers, one adding a prefix space, one under a normalizer for ASCII), and not given for
tokenizers where it is not proven (Metaspace, a Replace normalizer, Unigram, WordPiece)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.validation.bounds import ByteBound, byte_bound
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import TextPrompt
from tests.support.transformers_reference import transformers
from tests.validation.conftest import CORPUS, make_tokenizer_dir, transformers_loaded

pytestmark = pytest.mark.xdist_group("transformers")

# Texts that stress the bound: multi-byte characters, emoji, combining marks, whitespace runs,
# control characters, and text spelling the tokenizers' special and added tokens.
TRICKY = [
    "", " ", "a", "  \n\t\r\x00 ", "<s>", "</s><s><unk>", "<|user|>\n", "é", "e\u0301",
    "你好\uff0c世界", "😀🚀👩‍👩‍👧", "\U0010ffff", "ﷺ", "İstanbul", "ß" * 30, " x" * 200,
]  # fmt: skip
ANY_TEXT = st.text(max_size=200) | st.sampled_from(TRICKY)


def from_files(path: Path) -> LocalCounter:
    return LocalCounter.load(str(path))


@pytest.fixture(scope="module", params=["tiny-files", "bpe-files", "bpe-transformers"])
def bounded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> LocalCounter:
    """Byte-level BPE counters: the tiny model's, and a trained one loaded both ways."""
    if request.param == "tiny-files":
        return from_files(tiny_model_dir)
    directory = make_tokenizer_dir(tmp_path_factory.mktemp("bpe"), None)
    return from_files(directory) if request.param == "bpe-files" else transformers_loaded(directory)


def exact(counter: LocalCounter, text: str, specials: bool) -> int:
    return counter.count_now(TextPrompt([text], specials, "input"))[0]


@settings(max_examples=300, deadline=None)
@given(text=ANY_TEXT, specials=st.booleans())
def test_no_text_has_more_tokens_than_its_bound(
    bounded: LocalCounter, text: str, specials: bool
) -> None:
    """Any text, with or without special tokens: the count is at most the bound."""
    assert bounded.bound is not None and not bounded.bound.ascii_only
    bound = bounded.bound.of(text, specials)
    assert bound is not None and exact(bounded, text, specials) <= bound


def test_the_bound_is_tight_where_each_byte_is_a_token(bounded: LocalCounter) -> None:
    """The bound adds the special tokens the tokenizer adds (one BOS here) and no more: an
    empty input with them is exactly the bound."""
    assert bounded.bound is not None
    assert exact(bounded, "", True) == bounded.bound.of("", True) == bounded.bound.specials == 1
    assert bounded.bound.of("", False) == 0


def test_upper_bounds_gives_one_per_input_token_ids_as_counted(bounded: LocalCounter) -> None:
    """`upper_bounds`: a text's bound, a token-id list's length."""
    prompt = TextPrompt(["héllo", [5, 6, 7]], True, "input")
    assert bounded.upper_bounds(prompt) == [len("héllo".encode()) + 1, 3]


def trained(pre_tokenizer: Any, normalizer: Any = None, model: str = "BPE") -> Any:
    """A `tokenizers` Tokenizer trained on the test corpus, as transformers' fast tokenizer."""
    from tokenizers import Tokenizer, models, processors, trainers

    if model == "BPE":
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer: Any = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"])
    elif model == "WordPiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token="<unk>"))
        trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"])
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=100, special_tokens=["<unk>", "<s>"])
    tokenizer.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    return transformers().PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


def test_a_prefix_space_is_one_byte_more() -> None:
    """ByteLevel with add_prefix_space: 1 more than the bytes; the count stays within it."""
    from tokenizers import pre_tokenizers

    tokenizer = trained(pre_tokenizers.ByteLevel(add_prefix_space=True))
    bound = byte_bound(tokenizer)
    assert bound == ByteBound(extra=1, specials=1, ascii_only=False)
    for text in TRICKY:
        assert len(tokenizer(text)["input_ids"]) <= bound.of(text, True)


def test_under_a_normalizer_only_ascii_texts_are_bounded() -> None:
    """An NFKC + lowercase normalizer may grow a non-ASCII text (ﷺ is 18 characters in
    NFKC): no bound for it; ASCII texts keep theirs."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer = trained(pre_tokenizers.Whitespace(), normalizer)
    bound = byte_bound(tokenizer)
    assert bound is not None and bound.ascii_only
    assert bound.of("ﷺ", True) is None and bound.of("é", True) is None
    for text in [t for t in TRICKY + CORPUS[:3] if t.isascii()]:
        assert len(tokenizer(text)["input_ids"]) <= bound.of(text, True)  # type: ignore[operator]


def test_tokenizers_without_a_proven_bound_have_none() -> None:
    """Metaspace (a prefix piece), a Replace normalizer, Unigram and WordPiece models, and a
    tokenizer with no `tokenizers` backend: no bound (their texts are tokenized)."""
    from tokenizers import normalizers, pre_tokenizers

    assert byte_bound(trained(pre_tokenizers.Metaspace())) is None
    replace = normalizers.Replace(" ", "\u2581")
    assert byte_bound(trained(pre_tokenizers.Whitespace(), replace)) is None
    assert byte_bound(trained(pre_tokenizers.Whitespace(), model="Unigram")) is None
    assert byte_bound(trained(pre_tokenizers.Whitespace(), model="WordPiece")) is None
    assert byte_bound(object()) is None
