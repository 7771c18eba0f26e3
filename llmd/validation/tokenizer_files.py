"""A model directory's tokenizer read with the `tokenizers` library and Jinja2 alone, for the
directories where that is exactly what transformers 5 loads: milliseconds instead of the 1.5-2 s
of CPU that importing transformers costs. `FileTokenizer.load` raises `NotReproducible` for
the rest, which then load with transformers (`counter.LocalCounter.load`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmd.validation.chat_render import render

# transformers 5.19 `SPECIAL_TOKENS_ATTRIBUTES`, in its order: the tokens a template sees by name.
_NAMED_TOKENS = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip
# tokenizer_config.json keys that change nothing in how transformers encodes or renders (or that
# are checked below); any other key means transformers may do something this module does not.
_INERT_KEYS = frozenset(
    {
        "tokenizer_class", "backend", "chat_template", "added_tokens_decoder", "model_max_length",
        "padding_side", "truncation_side", "clean_up_tokenization_spaces", "model_input_names",
        *_NAMED_TOKENS,
    }
)  # fmt: skip
# Classes that transformers 5 loads from tokenizer.json as it is (`PreTrainedTokenizerFast` is an
# alias of `TokenizersBackend`); a model class (LlamaTokenizerFast...) rebuilds it from its parts.
_GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
# config.json model types whose tokenizer_config class transformers 5.19 keeps (it overrides the
# class for model types it lists in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS); no config.json
# keeps it too. Only the types checked by the parity tests are listed.
_MODEL_TYPES = frozenset({"llama"})
# Files that add tokens or templates to what tokenizer.json and tokenizer_config.json say.
_OTHER_FILES = ("added_tokens.json", "chat_template.json", "additional_chat_templates")
# Above this vocabulary size transformers may rewrite the pre-tokenizer (`_patch_mistral_regex`).
_MAX_VOCAB = 100_000
# An added token's flags, and their values when transformers re-adds a named special token
# given as a string.
_FLAGS = ("special", "normalized", "lstrip", "rstrip", "single_word")
_PLAIN_SPECIAL = {"special": True, "normalized": False, "lstrip": False, "rstrip": False,
                  "single_word": False}  # fmt: skip


class NotReproducible(Exception):
    """This directory's tokenizer might load differently here than with transformers."""


class FileTokenizer:
    """The surface of a transformers tokenizer that `LocalCounter` uses: `get_vocab`,
    `get_chat_template`, `apply_chat_template(tokenize=False)`, a call giving `input_ids`,
    `decode` and `convert_ids_to_tokens`.
    Not thread-safe (the Rust tokenizer is not): `LocalCounter` serializes its use."""

    def __init__(self, backend: Any, specials: Mapping[str, str], template: str | None) -> None:
        self._backend = backend
        self.special_tokens_map = dict(specials)
        self._template = template

    @classmethod
    def load(cls, path: str) -> FileTokenizer:
        """Read the tokenizer in directory `path`. Raises NotReproducible with the reason when
        transformers 5 could load it differently (see the module's constants), ImportError
        without `tokenizers`, OSError, ValueError or the Rust tokenizer's Exception when the
        files do not read."""
        root = Path(path)
        config = _json_file(root / "tokenizer_config.json")
        _check_settings(root, config)
        if not (root / "tokenizer.json").is_file():
            raise NotReproducible("no tokenizer.json")
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(root / "tokenizer.json"))
        if backend.truncation is not None or backend.padding is not None:
            raise NotReproducible("tokenizer.json sets truncation or padding")
        if backend.post_processor is None:
            raise NotReproducible("tokenizer.json has no post_processor")
        if backend.get_vocab_size() > _MAX_VOCAB:
            raise NotReproducible(f"vocabulary of {backend.get_vocab_size()} tokens")
        if config.get("clean_up_tokenization_spaces") and type(backend.model).__name__ != "BPE":
            # transformers cleans decoded text up then (BPE models excepted); this class does not
            raise NotReproducible("clean_up_tokenization_spaces on a tokenizer other than BPE")
        backend.encode_special_tokens = False  # transformers: split_special_tokens=False
        specials = _special_tokens(root, config, _added_tokens(backend, config))
        return cls(backend, specials, _chat_template(root, config))

    @property
    def backend_tokenizer(self) -> Any:
        """The `tokenizers` Tokenizer it runs (transformers' fast tokenizers name it so)."""
        return self._backend

    def get_vocab(self) -> dict[str, int]:
        """Token to id, added tokens included."""
        vocab: dict[str, int] = self._backend.get_vocab(with_added_tokens=True)
        return vocab

    def get_chat_template(self) -> str:
        """The chat template. Raises ValueError when the tokenizer has none."""
        if self._template is None:
            raise ValueError("the tokenizer has no chat template")
        return self._template

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        """`{"input_ids": ids}` of `text`, as transformers' tokenizer call (no truncation)."""
        encoding = self._backend.encode_batch([text], add_special_tokens=add_special_tokens)[0]
        return {"input_ids": list(encoding.ids)}

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens kept, as transformers 5.19 `decode(ids)` gives it
        (no clean-up of spaces: `load` refuses the tokenizers that would have one)."""
        text: str = self._backend.decode(ids, skip_special_tokens=False)
        return text

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        """Each id's token string, as transformers 5.19 `convert_ids_to_tokens(ids)`."""
        return [self._backend.id_to_token(int(index)) for index in ids]

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        chat_template: str | None = None,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """The text of `conversation` through `chat_template` (default: the tokenizer's), as
        transformers 5.19 `apply_chat_template(tokenize=False)` and `render_jinja_template` give
        it: `tools` as JSON schemas (dicts, given to the template as they are), no documents.
        Raises what the template raises, ValueError as transformers for an empty conversation
        or a final message it cannot continue."""
        assert not tokenize, "FileTokenizer renders text only"
        template = chat_template if chat_template is not None else self.get_chat_template()
        if not conversation:
            raise ValueError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final message, "
                "and add_generation_prompt when you want to add a header that will prompt it to "
                "start a new assistant message instead."
            )
        return render(
            conversations=conversation,
            tools=None if tools is None else list(tools),
            documents=None,
            chat_template=template,
            continue_final_message=continue_final_message,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens_map, **kwargs},
        )


def _json_file(path: Path) -> dict[str, Any]:
    """A JSON object file. Raises NotReproducible when it is missing, ValueError when it is
    not a JSON object."""
    if not path.is_file():
        raise NotReproducible(f"no {path.name}")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def _check_settings(root: Path, config: dict[str, Any]) -> None:
    """Raises NotReproducible when the tokenizer's class, a setting of tokenizer_config.json,
    another file or the model's type may make transformers load more than tokenizer.json."""
    if config.get("tokenizer_class") not in _GENERIC_CLASSES:
        raise NotReproducible(f"tokenizer_class {config.get('tokenizer_class')!r}")
    unknown = sorted(set(config) - _INERT_KEYS)
    if unknown or config.get("backend", "tokenizers") != "tokenizers":
        raise NotReproducible(f"tokenizer_config.json sets {unknown or ['backend']}")
    if others := [name for name in _OTHER_FILES if (root / name).exists()]:
        raise NotReproducible(f"the directory has {others}")
    if (root / "config.json").exists():
        model = _json_file(root / "config.json")
        if model.get("model_type") not in _MODEL_TYPES or "tokenizer_class" in model:
            raise NotReproducible(f"model_type {model.get('model_type')!r}")


def _added_tokens(backend: Any, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """tokenizer.json's added tokens by content (their flags). tokenizer_config.json's
    `added_tokens_decoder` must list only these, as they are, or transformers adds its own."""
    by_id = {
        index: {"content": token.content, **{flag: getattr(token, flag) for flag in _FLAGS}}
        for index, token in backend.get_added_tokens_decoder().items()
    }
    for index, token in (config.get("added_tokens_decoder") or {}).items():
        known = by_id.get(int(index))
        if known is None or any(token.get(key) != value for key, value in known.items()):
            raise NotReproducible(f"added_tokens_decoder[{index}] differs from tokenizer.json")
    return {token["content"]: token for token in by_id.values()}


def _special_tokens(
    root: Path, config: dict[str, Any], added: dict[str, dict[str, Any]]
) -> dict[str, str]:
    """The named special tokens (as `special_tokens_map`). Each must already be a plain special
    added token of tokenizer.json, so that transformers' re-adding it changes nothing."""
    named: dict[str, Any] = {key: config[key] for key in _NAMED_TOKENS if key in config}
    legacy = root / "special_tokens_map.json"
    if legacy.exists() and "added_tokens_decoder" not in config:  # transformers reads it then
        extra = _json_file(legacy)
        if unknown := sorted(set(extra) - set(_NAMED_TOKENS)):
            raise NotReproducible(f"special_tokens_map.json sets {unknown}")
        named.update(extra)
    specials: dict[str, str] = {}
    for key in _NAMED_TOKENS:
        value = named.get(key)
        if value is None:
            continue
        content = value.get("content") if isinstance(value, dict) else value
        if not isinstance(content, str):
            raise NotReproducible(f"{key} is not a token")
        token = added.get(content)
        if token is None or any(token.get(k) != v for k, v in _PLAIN_SPECIAL.items()):
            raise NotReproducible(
                f"{key} {content!r} is not a plain special token of tokenizer.json"
            )
        specials[key] = content
    return specials


def _chat_template(root: Path, config: dict[str, Any]) -> str | None:
    """chat_template.jinja (first, as transformers) or tokenizer_config's single template."""
    jinja_file = root / "chat_template.jinja"
    if jinja_file.exists():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if template is not None and not isinstance(template, str):
        raise NotReproducible("named chat templates")
    return template
