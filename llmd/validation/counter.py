"""Prompt token counts, as the engine will count them: locally, or by asking the engine.

`LocalCounter` loads the model's tokenizer as transformers does (what vLLM 0.32 itself uses for
Hugging Face models: `AutoTokenizer.from_pretrained`, `apply_chat_template(tokenize=False)`, then
the tokenizer on the text): read from its files (`tokenizer_files`) where that gives exactly
transformers' tokenizer, with transformers otherwise. It counts off the event loop on one of two
lanes (`lanes`: short jobs, long ones), or a short prompt at once on the loop when the short
lane is idle (`count_inline`).
`EngineCounter` asks the engine's `POST /tokenize`: exact by construction, one round trip per
request. It counts what the local one cannot render (tools, request templates, images) and
stands in when no local tokenizer loads.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from llmd.engine.client import EngineClient
from llmd.errors import ApiError, EngineError, EngineUnavailable, InvalidRequest
from llmd.validation.bounds import ByteBound, byte_bound
from llmd.validation.context import AtLeast
from llmd.validation.conversation import (
    ContentFormat,
    build_conversation,
    detect_content_format,
    parse_template,
)
from llmd.validation.fields import ChatPrompt, Counted, EnginePrompt, Renderable, TextPrompt
from llmd.validation.lanes import Lane
from llmd.validation.tokenizer_files import FileTokenizer

# apply_chat_template's own parameters: taken from the request's fields (or meaningless with
# tokenize=False), never from its chat_template_kwargs.
_HF_PARAMS = frozenset(
    {
        "conversation", "tools", "documents", "chat_template", "add_generation_prompt",
        "continue_final_message", "tokenize", "padding", "truncation", "max_length",
        "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
    }
)  # fmt: skip


class TokenizerUnavailable(Exception):
    """No local tokenizer could be loaded from the given path."""


class CountUnsupported(Exception):
    """The backend has no `/tokenize` (404: a router in front of vLLM, another server)."""


class LocalCounter:
    """A model's tokenizer, loaded locally; counting runs on its lanes (`lanes.Lane`).

    A lane is one thread with a tokenizer of its own, because Hugging Face fast tokenizers are
    not safe to share across threads (vLLM wraps them in a pool for the same reason; "Already
    borrowed") and because on a small machine counting should not take much CPU from the
    engine. Two lanes: short jobs, and long ones (`long=True`: the caller decides, by the
    request's bytes), whose tokenizer is a copy made at the first long job; so a long
    tokenization never holds up a short one. A short prompt may be counted on the event loop's
    thread (`count_inline`) while the short lane is idle, without a third tokenizer in memory.
    """

    def __init__(self, tokenizer: Any, template: str | None, max_token_id: int) -> None:
        self._tokenizer = tokenizer  # the short lane's
        self._template = template
        self._format: ContentFormat = (
            detect_content_format(parse_template(template)) if template else "string"
        )
        self.max_token_id = max_token_id
        self.max_chars_per_token = max(len(t) for t in tokenizer.get_vocab())
        self.bound: ByteBound | None = _bound_of(tokenizer)
        self._short = Lane("llmd-tokenizer", lambda: tokenizer)
        self._long = Lane("llmd-tokenizer-long", lambda: copy.deepcopy(tokenizer))

    @classmethod
    def load(cls, path: str) -> LocalCounter:
        """Load the tokenizer in directory `path` (or a cached hub name, offline only).

        Blocking (milliseconds read from its files, `tokenizer_files`; about 2 s of CPU where it
        takes transformers); call it from a thread. Raises TokenizerUnavailable with the reason.
        """
        with _LOADING:
            tokenizer = _load_from_files(path) or _load_tokenizer(path)
        if not hasattr(tokenizer, "apply_chat_template"):
            raise TokenizerUnavailable(f"{type(tokenizer).__name__} has no chat template support")
        template: str | None
        try:
            template = tokenizer.get_chat_template()
        except ValueError:
            template = None  # completions still count locally; chat asks the engine
        if template is not None and _has_processor_files(path):
            template = None  # vLLM prefers a processor's chat template: let the engine render
        vocab_size = _config_vocab_size(path)
        max_token_id = max(max(tokenizer.get_vocab().values()), vocab_size - 1)
        return cls(tokenizer, template, max_token_id)

    @property
    def has_template(self) -> bool:
        """Whether chat prompts can be rendered here (the tokenizer has a chat template)."""
        return self._template is not None

    def _lane(self, long: bool) -> Lane:
        """The lane for a long job (`long`), or for a short one."""
        return self._long if long else self._short

    def close(self) -> None:
        """Release the lanes' threads once the jobs queued on them are done. A reload or a
        deploy may replace this counter while requests that took it have yet to ask for their
        count: those are counted on a thread of their own."""
        self._short.close()
        self._long.close()

    def can_count(self, prompt: Counted) -> TypeGuard[Renderable]:
        """Whether this counter renders `prompt` exactly as the engine does."""
        if isinstance(prompt, EnginePrompt):
            return False
        if isinstance(prompt, TextPrompt):
            return True
        return prompt.local and self._template is not None

    def can_bound(self, prompt: Counted) -> TypeGuard[ChatPrompt]:
        """Whether `prompt`, which the engine counts, renders here as the engine renders it
        (`ChatPrompt.rendered_here`), so that `at_least` its text bounds its tokens."""
        return (
            isinstance(prompt, ChatPrompt) and prompt.rendered_here and self._template is not None
        )

    def at_least(self, text: str, limit: int | None) -> AtLeast | None:
        """`text`'s tokens when it is longer than `limit` tokens could possibly be (more than
        `limit` times the longest token's characters): `AtLeast` its characters over the
        longest token's, a true bound, without tokenizing; else None (tokenize it). vLLM 0.32
        refuses such a text the same way (`TokenizeParams._text_len_check`, `max_chars_per_token`:
        the longest vocabulary string)."""
        longest = self.max_chars_per_token
        if limit is None or len(text) <= limit * longest:
            return None
        return AtLeast(-(-len(text) // longest))

    async def rendered_at_least(
        self, prompt: ChatPrompt, limit: int, *, long: bool = False
    ) -> AtLeast | None:
        """`at_least` of `prompt` rendered here (a prompt `can_bound` accepts, that the engine
        counts): its tokens when it cannot fit `limit`, else None. On the short lane, or the
        long one (`long`). Raises InvalidRequest when the chat template refuses it."""
        return await self._lane(long).run(
            lambda tokenizer: self.at_least(self.render(prompt, tokenizer), limit)
        )

    def upper_bounds(self, prompt: TextPrompt) -> list[int] | None:
        """Per prompt, at least its tokens, without tokenizing (`bounds.ByteBound`: a text's
        UTF-8 bytes plus what the tokenizer adds; token ids: their number); None when this
        tokenizer has no proven bound for one of the texts."""
        bound, bounds = self.bound, []
        for p in prompt.prompts:
            if isinstance(p, list):
                bounds.append(len(p))
                continue
            most = None if bound is None else bound.of(p, prompt.add_special_tokens)
            if most is None:
                return None
            bounds.append(most)
        return bounds

    async def count(
        self, prompt: Renderable, limit: int | None = None, *, long: bool = False
    ) -> list[int]:
        """Prompt tokens per sequence (one per completion prompt), on the short lane, or the
        long one (`long`).

        A text longer than `limit` tokens could possibly be is not tokenized: it counts as
        `at_least` gives it (more than `limit`). Raises InvalidRequest (naming the field) when
        the chat template or the tokenizer refuses the input.
        """
        return await self._lane(long).run(lambda tokenizer: self._count(tokenizer, prompt, limit))

    def count_inline(self, prompt: Renderable, limit: int | None = None) -> list[int] | None:
        """Prompt tokens per sequence on the calling thread (the event loop's), or None, at
        once, when the short lane's tokenizer is in use on its thread (then count there,
        `count`).

        For short prompts only: the caller keeps the loop's time bounded (tens to hundreds of
        µs for a prompt of a few hundred characters); it saves the hand-off to the tokenizer
        thread and back (two wake-ups, and the wait for the GIL while the loop holds it). Raises
        as `count`."""
        done = self._short.inline(lambda tokenizer: self._count(tokenizer, prompt, limit))
        return None if done is None else done[0]

    def count_now(self, prompt: Renderable, limit: int | None = None) -> list[int]:
        """Prompt tokens per sequence, on the calling thread (blocking); see `count`."""
        return self._short.now(lambda tokenizer: self._count(tokenizer, prompt, limit))

    def _count(self, tokenizer: Any, prompt: Renderable, limit: int | None) -> list[int]:
        if isinstance(prompt, TextPrompt):
            return [
                len(p)
                if isinstance(p, list)
                else self._encode(tokenizer, p, prompt.add_special_tokens, limit, prompt.param)
                for p in prompt.prompts
            ]
        text = self.render(prompt, tokenizer)
        return [self._encode(tokenizer, text, prompt.add_special_tokens, limit, "messages")]

    async def tokenize(self, prompt: Renderable, *, long: bool = False) -> list[int]:
        """The token ids of `prompt`'s first text (a chat: its rendered template), as vLLM
        0.32's /tokenize gives them, however long (its /tokenize has no length limit), on the
        short lane or the long one (`long`). Raises InvalidRequest as `count`."""
        return await self._lane(long).run(lambda tokenizer: self._ids(tokenizer, prompt))

    async def detokenize(self, ids: list[int], *, long: bool = False) -> tuple[str, list[str]]:
        """The text of `ids` (`tokenizer.decode`, special tokens kept: vLLM 0.32's
        /detokenize, renderers/base.py `_detokenize_prompt`) and each id's token string
        (`convert_ids_to_tokens`, its /tokenize's `token_strs`), on the lane `long` names."""
        return await self._lane(long).run(lambda tokenizer: _decode(tokenizer, ids))

    def _ids(self, tokenizer: Any, prompt: Renderable) -> list[int]:
        if isinstance(prompt, TextPrompt):
            first = prompt.prompts[0]
            if not isinstance(first, str):
                return list(first)
            text = first
        else:
            text = self.render(prompt, tokenizer)
        try:
            ids: list[int] = tokenizer(text, add_special_tokens=prompt.add_special_tokens)[
                "input_ids"
            ]
        except Exception as exc:
            raise InvalidRequest(
                f"the tokenizer refused the {prompt.param}: {type(exc).__name__}: {exc}",
                param=prompt.param,
            ) from exc
        return ids

    def render(self, prompt: ChatPrompt, tokenizer: Any = None) -> str:
        """The chat template applied to `prompt`, as text (vLLM 0.32 `safe_apply_chat_template`),
        by `tokenizer` (a lane's; default the short lane's: call it holding that lane). Raises
        InvalidRequest when the template refuses the messages."""
        assert self._template is not None
        tokenizer = self._tokenizer if tokenizer is None else tokenizer
        extra = {k: v for k, v in prompt.template_kwargs.items() if k not in _HF_PARAMS}
        try:
            conversation = build_conversation(prompt.messages, self._format, self._template)
            text: str = tokenizer.apply_chat_template(
                conversation,
                tools=prompt.tools,
                chat_template=self._template,
                tokenize=False,
                add_generation_prompt=prompt.add_generation_prompt,
                continue_final_message=prompt.continue_final_message,
                **extra,
            )
        except Exception as exc:  # the template rejects the input: vLLM answers 400 too
            raise InvalidRequest(
                f"the chat template rejected the messages: {exc}", param="messages"
            ) from exc
        return text

    def _encode(
        self, tokenizer: Any, text: str, add_special_tokens: bool, limit: int | None, field: str
    ) -> int:
        """Tokens in `text` (from request field `field`), `at_least` when it cannot fit `limit`.
        Raises InvalidRequest when the tokenizer refuses it (vLLM answers such input with 400
        too)."""
        bound = self.at_least(text, limit)
        if bound is not None:
            return bound
        try:
            ids = tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        except Exception as exc:
            raise InvalidRequest(
                f"the tokenizer refused the {field}: {type(exc).__name__}: {exc}", param=field
            ) from exc
        return len(ids)


def _decode(tokenizer: Any, ids: list[int]) -> tuple[str, list[str]]:
    text: str = tokenizer.decode(ids)
    strs: list[str] = tokenizer.convert_ids_to_tokens(ids)
    return text, strs


class EngineCounter:
    """Counts through a backend's `POST /tokenize` (vLLM 0.32; counts but does not check
    the context length). `client` gives the client of a backend serving the model. Raises
    CountUnsupported when the backend answers 404 (it has no /tokenize)."""

    def __init__(self, client: Callable[[], EngineClient]) -> None:
        self._client = client

    async def count(self, prompt: Counted, model: str | None) -> list[int]:
        """Tokens per prompt: each text's by /tokenize, a chat's by /tokenize with the fields
        it needs, a request only the engine counts by its own counting route."""
        if isinstance(prompt, EnginePrompt):
            body = dict(prompt.body)
            sent = tuple(body)
            return [await self._tokenize(body, model, sent, prompt.path, prompt.count_field)]
        if isinstance(prompt, TextPrompt):
            counts = []
            for p in prompt.prompts:
                if isinstance(p, list):
                    counts.append(len(p))
                else:
                    body = {"prompt": p, "add_special_tokens": prompt.add_special_tokens}
                    counts.append(await self._tokenize(body, model, ("prompt",)))
            return counts
        sent = ("messages", *prompt.engine_extras)
        sent += ("chat_template_kwargs",) if prompt.template_kwargs else ()
        return [await self._tokenize(_chat_tokenize_body(prompt), model, sent)]

    async def _tokenize(
        self,
        body: dict[str, Any],
        model: str | None,
        sent: Sequence[str],
        path: str = "/tokenize",
        field: str = "count",
    ) -> int:
        """The count `path` (/tokenize) gives `body`, read from the answer's `field`; `sent`
        names the client's fields in it (the rest llmd filled in), the only fields an error
        may name."""
        if model is not None:
            body["model"] = model
        client = self._client()
        try:
            answer = await client.fetch(
                "POST",
                path,
                timeout_s=TOKENIZE_TIMEOUT_S,
                body=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
        except (TimeoutError, OSError) as exc:
            raise EngineUnavailable(
                f"cannot count prompt tokens: the engine's {path} failed: "
                f"{exc or f'no answer in {TOKENIZE_TIMEOUT_S:g} s'}",
                retry_after_s=1,
            ) from exc
        if answer.status == 404:
            raise CountUnsupported(f"{client.url(path)} answered 404")
        return _tokenize_count(answer.status, answer.body, sent, field)


# How long the engine's /tokenize may take to answer (s).
TOKENIZE_TIMEOUT_S = 30.0


def _chat_tokenize_body(prompt: ChatPrompt) -> dict[str, Any]:
    return {
        "messages": prompt.messages,
        "add_generation_prompt": prompt.add_generation_prompt,
        "continue_final_message": prompt.continue_final_message,
        "add_special_tokens": prompt.add_special_tokens,
        "chat_template_kwargs": prompt.template_kwargs or None,
        **prompt.engine_extras,
    }


def _tokenize_count(status: int, payload: bytes, sent: Sequence[str], field: str = "count") -> int:
    """The `field` (`count`) of a /tokenize answer; a 4xx becomes the client's 400
    (`refusal`)."""
    try:
        answer = json.loads(payload)
    except ValueError:
        answer = None
    if status == 200 and isinstance(answer, dict) and isinstance(answer.get(field), int):
        count: int = answer[field]
        return count
    message = payload.decode(errors="replace")[:300]
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        message = str(answer["error"].get("message", message))
    error: ApiError
    if 400 <= status < 500:
        error = refusal(message, sent)
    else:
        error = EngineError(f"the engine's count failed with HTTP {status}: {message}")
    raise error


# vLLM 0.32 answers a body its pydantic models refuse with "N validation error(s):" and one
# {'type', 'loc': 'body.FIELD...', 'msg', 'input'} per error, over every arm of its
# TokenizeRequest union (so a chat body also gets "body.prompt: Field required").
_PYDANTIC_DUMP = re.compile(r"\b\d+ validation errors?\b")
_ERROR_AT = re.compile(r"'loc': '(?:body\.)?([^'.]+)([^']*)', 'msg': (?:'([^']*)'|\"([^\"]*)\")")


def refusal(message: str, sent: Sequence[str]) -> InvalidRequest:
    """The client's 400 for /tokenize's 4xx `message`, naming only fields in `sent` (those the
    client sent): vLLM's own sentence as it is; a pydantic dump becomes its first error on one
    of `sent` ("'tools' is not valid: Input should be a valid list"), else a generic sentence."""
    if not _PYDANTIC_DUMP.search(message):
        return InvalidRequest(message)
    for field, path, quoted, double_quoted in _ERROR_AT.findall(message):
        if field in sent:
            return InvalidRequest(
                f"'{field}{path}' is not valid: {quoted or double_quoted}", param=field
            )
    return InvalidRequest(
        f"the engine could not read this request's {', '.join(sent)} to count its prompt "
        "tokens; check their shape against the OpenAI API"
    )


# One tokenizer load at a time in a process: transformers' first import is not safe to run on two
# threads at once (its lazy module answers the second "cannot import name 'AutoTokenizer'"),
# and several models' validators, or a reload during a load, load on threads of their own.
_LOADING = threading.Lock()


def _load_from_files(path: str) -> FileTokenizer | None:
    """The tokenizer in `path` read without transformers, or None where transformers must
    load it: it may load it differently (`tokenizer_files.NotReproducible`), `tokenizers` is
    not installed, or the files do not read (transformers then gives the reason)."""
    try:
        return FileTokenizer.load(path)
    except Exception:  # the Rust tokenizer's parse errors are plain Exceptions
        return None


def _load_tokenizer(path: str) -> Any:
    """`AutoTokenizer.from_pretrained(path)`, offline, transformers imported without torch;
    call it holding `_LOADING`. Raises TokenizerUnavailable."""
    try:
        with _torch_hidden():
            from transformers import AutoTokenizer
            from transformers.utils import logging as transformers_logging
    except ImportError as exc:
        raise TokenizerUnavailable(f"transformers is not installed: {exc}") from exc
    # transformers writes its warnings to stderr with a handler of its own; send them the way of
    # every library's lines instead (llmd.logs: rate-limited, rendered as llmd's).
    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise TokenizerUnavailable(f"cannot load a tokenizer from {path}: {exc}") from exc


@contextlib.contextmanager
def _torch_hidden() -> Iterator[None]:
    """Import transformers without torch, when neither is imported yet.

    transformers 5 imports torch whenever it is installed (vLLM's venv has it): seconds of CPU and
    about 330 MiB of RSS in llmd, and 280,000 more objects for every full garbage collection
    to walk, though a tokenizer needs none of it. transformers decides once (`is_torch_available`
    is cached) through `importlib.util.find_spec`, which answers None for a module set to None
    in `sys.modules`; its advisory line about the missing torch is silenced
    (`TRANSFORMERS_NO_ADVISORY_WARNINGS`). A later `import torch` elsewhere works as usual.
    """
    if "torch" in sys.modules or "transformers" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    advisory = os.environ.get("TRANSFORMERS_NO_ADVISORY_WARNINGS")
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
        if advisory is None:
            os.environ.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)
        else:
            os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = advisory


def _bound_of(tokenizer: Any) -> ByteBound | None:
    """`bounds.byte_bound` of `tokenizer`, None when it cannot be read (any error: then every
    text is tokenized, as without a bound)."""
    try:
        return byte_bound(tokenizer)
    except Exception:
        return None


def _has_processor_files(path: str) -> bool:
    root = Path(path)
    return any(
        (root / name).exists() for name in ("processor_config.json", "preprocessor_config.json")
    )


def _config_vocab_size(path: str) -> int:
    """The model's `vocab_size` from config.json (vLLM accepts ids below it), or 0."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    return size if isinstance(size, int) else 0
