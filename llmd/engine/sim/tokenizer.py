"""The model directory's own tokenizer and chat template, counted exactly as vLLM 0.32 counts.

`tokenizer.json` is loaded with the `tokenizers` library and `tokenizer_config.json`'s
`chat_template` is rendered in a sandboxed jinja2 environment set up as transformers sets it
(`trim_blocks`, `lstrip_blocks`, `loopcontrols`, `raise_exception`, `tojson`), which boots in
well under a second where transformers would take several. Prompts get the tokenizer's special
tokens (BOS); a rendered chat prompt does not, since the template writes its own (vLLM 0.32:
chat `add_special_tokens` defaults to false).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class TemplateError(ValueError):
    """The chat cannot be rendered (no template, empty conversation, the template raised)."""


class SimTokenizer:
    """Encode prompts and chats to token ids; decode generated ids to text."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        config_path = model_dir / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.exists() else {}
        self.special_tokens = {
            name: _token_text(config.get(name))
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
        }
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self._template_source: str | None = template
        self._template: Any = None
        self.vocab_size = self._tok.get_vocab_size()
        # The longest token in characters: vLLM 0.32 refuses a prompt of more characters than
        # this times the token budget before tokenizing it (tokenizers/hf.py).
        self.max_chars_per_token = max(map(len, self._tok.get_vocab()), default=1)
        self._clean_ids = self._printable_ids()
        self._pieces: dict[int, str] = {}

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`, as vLLM tokenizes a completion prompt."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_pair(self, first: str, second: str) -> list[int]:
        """Token ids of a text pair with the tokenizer's pair template (`tokenizer(text=...,
        text_pair=...)`, as vLLM 0.32's cross-encoder scoring tokenizes a query and a
        document)."""
        return list(self._tok.encode(first, second, add_special_tokens=True).ids)

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """`text` cut at a character boundary to at most `max_tokens` tokens without special
        tokens (vLLM 0.32's scoring/utils.py `truncate_text_to_tokens`, by offsets)."""
        if max_tokens <= 0:
            return ""
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= max_tokens:
            return text
        return text[: min(offsets[max_tokens - 1][1], offsets[max_tokens][0])]

    def render_chat(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        **extra: Any,
    ) -> str:
        """The prompt text of a chat. Raises `TemplateError`."""
        if not messages:
            raise TemplateError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        template = self._compiled_template()
        normalized = [_flatten_content(message) for message in messages]
        try:
            rendered: str = template.render(
                messages=normalized,
                add_generation_prompt=add_generation_prompt and not continue_final_message,
                tools=extra.pop("tools", None),
                documents=extra.pop("documents", None),
                **self.special_tokens,
                **extra,
            )
        except Exception as exc:  # jinja2 errors and the template's raise_exception()
            raise TemplateError(f"chat template failed: {exc}") from exc
        if continue_final_message:
            final = normalized[-1].get("content")
            if isinstance(final, str) and final and final in rendered:
                rendered = rendered[: rendered.rindex(final) + len(final)]
        return rendered

    def encode_chat(self, messages: Sequence[dict[str, Any]], **options: Any) -> list[int]:
        """Token ids of a chat prompt (template rendered, no extra special tokens)."""
        return self.encode(self.render_chat(messages, **options), add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens skipped (vLLM's default `skip_special_tokens`)."""
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def decode_all(self, ids: Sequence[int]) -> str:
        """Text of `ids` with special tokens kept: what vLLM 0.32's /detokenize answers
        (`tokenizer.decode` with its defaults); ids outside the vocabulary decode to nothing."""
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """The vocabulary strings of `ids` (`return_token_strs` of /tokenize)."""
        return [self._tok.id_to_token(i) or "" for i in ids]

    def sample_id(self, rng: random.Random) -> int:
        """One id drawn from tokens that decode alone to printable text, so that a generated
        sequence decodes cleanly token by token (`piece`), as a stream shows it."""
        return rng.choice(self._clean_ids)

    def piece(self, token_id: int) -> str:
        """The text of one generated token (cached)."""
        text = self._pieces.get(token_id)
        if text is None:
            text = self._pieces[token_id] = self.decode([token_id])
        return text

    def _printable_ids(self) -> list[int]:
        specials = {tok for tok in self.special_tokens.values() if tok}
        ids = []
        for token_id in range(self.vocab_size):
            token = self._tok.id_to_token(token_id)
            if token is None or token in specials:
                continue
            text = self._tok.decode([token_id])
            if text and "\ufffd" not in text and text.isprintable():
                ids.append(token_id)
        return ids or [0]

    def _compiled_template(self) -> Any:
        if self._template is None:
            if not self._template_source:
                raise TemplateError(
                    "As of transformers v4.44, default chat template is no longer allowed, so "
                    "you must provide a chat template if the tokenizer does not define one."
                )
            self._template = _jinja_environment().from_string(self._template_source)
        return self._template


def _token_text(value: object) -> str:
    """A special token from tokenizer_config: a string, or an AddedToken dict with `content`."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def _flatten_content(message: dict[str, Any]) -> dict[str, Any]:
    """vLLM's "string" content format: a list of text parts becomes their texts joined by
    newlines (seen on 0.32: [a, b] tokenizes as "a\\nb")."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [part.get("text", "") if isinstance(part, dict) else str(part) for part in content]
        return {**message, "content": "\n".join(texts)}
    return message


def _jinja_environment() -> Any:
    """A sandboxed environment configured as transformers' `_compile_jinja_template`."""
    import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env
