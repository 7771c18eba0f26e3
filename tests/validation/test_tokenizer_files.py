"""The tokenizer read from its files (`tokenizer_files`) against transformers on the same
directory: the same chat text, the same ids and counts, the same refusals; a directory it might
read differently loads with transformers."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.endpoints.openai import read_chat, read_completions
from llmd.errors import InvalidRequest
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import ChatPrompt
from llmd.validation.tokenizer_files import FileTokenizer, NotReproducible
from tests.support.prompt_corpus import TEXTS, chat_corpus, completion_corpus
from tests.validation.conftest import make_tokenizer_dir, transformers_loaded
from tests.validation.test_counter import _LOAD_IN_A_FRESH_PYTHON, in_a_fresh_python

# The worker of the tests that import transformers (tests/support/xdist_groups.py): most tests
# here compare with it, whose import costs 1.5-2 s of CPU in each worker that loads it.
pytestmark = pytest.mark.xdist_group("transformers")

# Jinja features chat templates use: the generation block, tojson, loop state, loop controls,
# raise_exception, a template variable from chat_template_kwargs, whitespace control.
RICH_TEMPLATE = (
    "{%- if messages[0]['role'] == 'tool' %}{{ raise_exception('tool first') }}{% endif -%}\n"
    "{{ bos_token }}{% for message in messages %}\n"
    "  {%- if message['role'] == 'assistant' %}<|assistant|>\n"
    "{% generation %}{{ message['content'] | trim }}{% endgeneration %}{{ eos_token }}\n"
    "  {%- else %}<|{{ message['role'] }}|>{{ message | tojson }}\n"
    "    {%- if loop.last and thinking is defined %}<think>{{ thinking }}</think>{% endif %}\n"
    "  {%- endif %}\n"
    "  {%- if loop.index > 12 %}{% break %}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def files_loaded(path: Path) -> LocalCounter:
    """LocalCounter.load, which must read `path` from its files."""
    counter = LocalCounter.load(str(path))
    assert isinstance(counter._tokenizer, FileTokenizer)
    return counter


@pytest.fixture(scope="module", params=["tiny", "string", "parts", "rich"])
def model_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> Path:
    """The tiny model, and test tokenizers with a string, a part-looping and a rich template."""
    if request.param == "tiny":
        return tiny_model_dir
    if request.param == "rich":
        return make_tokenizer_dir(tmp_path_factory.mktemp("tok-rich"), RICH_TEMPLATE)
    fixture = "parts_tokenizer_dir" if request.param == "parts" else "tokenizer_dir"
    return Path(request.getfixturevalue(fixture))


@pytest.fixture(scope="module")
def pair(model_dir: Path) -> tuple[LocalCounter, LocalCounter]:
    """(read from the files, loaded with transformers) on the same directory."""
    return files_loaded(model_dir), transformers_loaded(model_dir)


def outcome(counter: LocalCounter, prompt: ChatPrompt) -> Any:
    """What counting `prompt` gives: the rendered chat text and the count, or the refusal (a
    Python call error names the function, transformers' or the file reader's: not compared)."""
    try:
        return counter.render(prompt), counter.count_now(prompt)
    except InvalidRequest as exc:
        return "refused", exc.param, re.sub(r"[\w.]+\(\) got", "() got", str(exc))


def chat_bodies() -> Iterator[dict[str, Any]]:
    """The engine parity corpus, plus bodies for continue_final_message, template variables,
    added special tokens and refusals."""
    yield from chat_corpus()
    last = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    parts = [{"type": "text", "text": "a "}, {"type": "text", "text": "Hel "}]
    yield {"messages": last, "continue_final_message": True, "add_generation_prompt": False}
    yield {"messages": [*last[:1], {"role": "assistant", "content": parts}],
           "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    yield {"messages": [*last[:1], {"role": "assistant", "content": "trailing  "}],
           "continue_final_message": True, "add_generation_prompt": False}  # fmt: skip
    yield {"messages": last, "chat_template_kwargs": {"thinking": "hmm", "bos_token": "<B>"}}
    yield {"messages": last, "chat_template_kwargs": {"messages": []}}
    yield {"messages": last, "chat_template_kwargs": {"conversations": []}}
    yield {"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}
    for text in TEXTS:
        yield {"messages": [{"role": "user", "content": text}], "add_special_tokens": True}


def test_chat_text_and_counts_equal_transformers(pair: tuple[LocalCounter, LocalCounter]) -> None:
    """Every chat body renders to the same text and count, or is refused alike."""
    files, transformers = pair
    assert files.has_template == transformers.has_template
    differ = []
    for body in chat_bodies():
        prompt = read_chat(body).prompt
        assert isinstance(prompt, ChatPrompt)
        assert files.can_count(prompt) and transformers.can_count(prompt), body
        if outcome(files, prompt) != outcome(transformers, prompt):
            differ.append((body, outcome(files, prompt), outcome(transformers, prompt)))
    assert differ == []


def test_completion_counts_equal_transformers(pair: tuple[LocalCounter, LocalCounter]) -> None:
    """Every completions prompt, special tokens added or not, counts the same."""
    files, transformers = pair
    for body in completion_corpus():
        prompt = read_completions(body).prompt
        assert files.count_now(prompt) == transformers.count_now(prompt), body


def test_vocabulary_and_limits_equal_transformers(pair: tuple[LocalCounter, LocalCounter]) -> None:
    """The same vocabulary, largest token id and longest token."""
    files, transformers = pair
    assert files._tokenizer.get_vocab() == transformers._tokenizer.get_vocab()
    assert files.max_token_id == transformers.max_token_id
    assert files.max_chars_per_token == transformers.max_chars_per_token


SPECIAL = st.sampled_from(["<s>", "</s>", "<unk>", "<pad>", "<|user|>", " <s> ", "\n</s>"])


@given(
    parts=st.lists(st.one_of(st.text(max_size=40), SPECIAL), max_size=8),
    add_special_tokens=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_ids_of_any_text_equal_transformers(
    tiny_pair: tuple[LocalCounter, LocalCounter], parts: list[str], add_special_tokens: bool
) -> None:
    """Any text, special tokens among it, gives the tiny model's ids exactly."""
    text = "".join(parts)
    files, transformers = (c._tokenizer for c in tiny_pair)
    expected = transformers(text, add_special_tokens=add_special_tokens)["input_ids"]
    assert files(text, add_special_tokens=add_special_tokens)["input_ids"] == expected


@given(ids=st.lists(st.integers(min_value=0, max_value=511), max_size=24))
@settings(max_examples=200, deadline=None)
def test_text_of_any_ids_equals_transformers(
    tiny_pair: tuple[LocalCounter, LocalCounter], ids: list[int]
) -> None:
    """Any ids of the tiny model's vocabulary decode to transformers' text and token strings
    (what /detokenize and /tokenize's token_strs answer)."""
    files, transformers = (c._tokenizer for c in tiny_pair)
    size = len(transformers.get_vocab())  # a dict of the whole vocabulary: once, not per id
    ids = [i % size for i in ids]
    assert files.decode(ids) == transformers.decode(ids)
    assert files.convert_ids_to_tokens(ids) == transformers.convert_ids_to_tokens(ids)


@pytest.fixture(scope="module")
def tiny_pair(tiny_model_dir: Path) -> tuple[LocalCounter, LocalCounter]:
    """(read from the files, loaded with transformers) on the tiny model."""
    return files_loaded(tiny_model_dir), transformers_loaded(tiny_model_dir)


def test_the_tiny_model_loads_without_transformers(
    tiny_model_dir: Path, tiny_pair: tuple[LocalCounter, LocalCounter]
) -> None:
    """In a fresh Python, the tiny model's counter loads and counts with neither transformers
    nor torch imported (transformers costs 1.5-2 s of CPU in every llmd that loads it)."""
    done = in_a_fresh_python(_LOAD_IN_A_FRESH_PYTHON, tiny_model_dir, "files")
    report = json.loads(done.stdout)
    chat = read_chat({"messages": [{"role": "user", "content": "Hello"}]})
    assert report["transformers"] is False and report["torch_hidden"] is True
    assert report["count"] == tiny_pair[1].count_now(chat.prompt)  # transformers' count


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _added_token_flags_differ(root: Path) -> None:
    config = json.loads((root / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {"1": {"content": "<s>", "special": True, "lstrip": True,
                                            "rstrip": False, "normalized": False,
                                            "single_word": False}}  # fmt: skip
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def _special_token_not_added(root: Path) -> None:
    (root / "special_tokens_map.json").unlink()  # it would name the pad token again
    edit_json(root / "tokenizer_config.json", pad_token="<extra_pad>")


# What each directory changes in a copy of the tiny model, and why transformers may read it
# otherwise than its tokenizer.json says.
DECLINED = {
    "model tokenizer class": lambda root: edit_json(
        root / "tokenizer_config.json", tokenizer_class="LlamaTokenizerFast"
    ),
    "unknown config key": lambda root: edit_json(
        root / "tokenizer_config.json", split_special_tokens=True
    ),
    "special token not added": _special_token_not_added,
    "added_tokens.json": lambda root: (root / "added_tokens.json").write_text('{"<x>": 2048}'),
    "model type": lambda root: edit_json(root / "config.json", model_type="qwen2"),
    "named templates": lambda root: edit_json(
        root / "tokenizer_config.json", chat_template=[{"name": "default", "template": "x"}]
    ),
    "truncation": lambda root: edit_json(
        root / "tokenizer.json",
        truncation={"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0},
    ),
    "added token flags": _added_token_flags_differ,
    "no tokenizer.json": lambda root: (root / "tokenizer.json").unlink(),
}


@pytest.mark.parametrize("change", DECLINED)
def test_what_it_might_read_otherwise_loads_with_transformers(
    change: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A directory with anything the file reader does not reproduce (a model's tokenizer
    class, an unknown setting, a special token that transformers would add...) is declined and
    LocalCounter loads it with transformers."""
    root = tmp_path / "model"
    shutil.copytree(tiny_model_dir, root, ignore=shutil.ignore_patterns("*.safetensors"))
    DECLINED[change](root)
    with pytest.raises(NotReproducible):
        FileTokenizer.load(str(root))
    if (root / "tokenizer.json").exists():
        assert not isinstance(LocalCounter.load(str(root))._tokenizer, FileTokenizer)


def test_a_special_token_transformers_adds_is_counted_as_transformers_counts(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Why it declines: a pad token missing from tokenizer.json is added by transformers, so
    its text is one token there and several in tokenizer.json alone; llmd counts one."""
    root = tmp_path / "model"
    shutil.copytree(tiny_model_dir, root, ignore=shutil.ignore_patterns("*.safetensors"))
    DECLINED["special token not added"](root)
    prompt = read_completions({"prompt": "<extra_pad>"}).prompt
    assert LocalCounter.load(str(root)).count_now(prompt) == [2]  # BOS and the pad token
    from tokenizers import Tokenizer

    assert len(Tokenizer.from_file(str(root / "tokenizer.json")).encode("<extra_pad>")) > 2
