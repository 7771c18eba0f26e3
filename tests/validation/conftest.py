"""Fixtures for validation tests: small Hugging Face tokenizer directories built on the spot."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from llmd.validation import counter as counter_module
from llmd.validation.counter import LocalCounter
from tests.support.transformers_reference import transformers

# The tiny model's template (scripts/make_tiny_model.py): content rendered as a string.
STRING_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# A template that loops over content parts: vLLM gives it the 'openai' content format.
PARTS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}[{{ part['text'] }}]{% endfor %}{% endif %}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! héllo wörld, 你好\uff0c世界 😀🚀 <|user|> <|assistant|> <|system|>",
    "def f(x): return x * 2  # code\n\tindent",
] * 50


def make_tokenizer_dir(path: Path, template: str | None) -> Path:
    """A byte-level BPE tokenizer with BOS/EOS and `template`, saved as a model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    fast = transformers().PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    if template is not None:
        fast.chat_template = template
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer directory with the tiny model's (string-content) chat template."""
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok-string"), STRING_TEMPLATE)


@pytest.fixture(scope="session")
def parts_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer directory whose chat template iterates over content parts."""
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok-parts"), PARTS_TEMPLATE)


def transformers_loaded(path: Path) -> LocalCounter:
    """`LocalCounter.load` with transformers, as for a tokenizer its files alone may not give
    (`llmd.validation.tokenizer_files`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(counter_module, "_load_from_files", lambda path: None)
        return LocalCounter.load(str(path))


@pytest.fixture(scope="session")
def counter(tokenizer_dir: Path) -> LocalCounter:
    """A LocalCounter on the string-template tokenizer."""
    return LocalCounter.load(str(tokenizer_dir))


def tokenizer_threads(counter: LocalCounter, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads `counter` tokenizes on, one per call, in order (a spy on its
    `_encode`, undone by `monkeypatch`)."""
    threads: list[str] = []
    original = counter._encode

    def spy(*args: Any) -> int:
        threads.append(threading.current_thread().name)
        return original(*args)

    monkeypatch.setattr(counter, "_encode", spy)
    return threads
