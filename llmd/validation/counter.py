"""Prompt token counts, as the engine will count them: locally, or by asking the engine.

`LocalCounter` loads the model's tokenizer as transformers does (what vLLM 0.32 itself uses for
Hugging Face models: `AutoTokenizer.from_pretrained`, `apply_chat_template(tokenize=False)`, then
the tokenizer on the text): read from its files (`tokenizer_files`) where that gives exactly
transformers' tokenizer, with transformers otherwise. It counts on one worker thread, off the
event loop, or a short prompt at once on the loop when that thread is idle (`count_inline`).
`EngineCounter` asks the engine's `POST /tokenize`: exact by construction, one round trip per
request. It counts what the local one cannot render (tools, request templates, images) and
stands in when no local tokenizer loads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

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


T = TypeVar("T")


class TokenizerUnavailable(Exception):
    """No local tokenizer could be loaded from the given path."""


class CountUnsupported(Exception):
    """The backend has no `/tokenize` (404: a router in front of vLLM, another server)."""


class LocalCounter:
    """A model's tokenizer, loaded locally; counting runs on one dedicated thread.

    One thread, because Hugging Face fast tokenizers are not safe to share across threads
    (vLLM wraps them in a pool for the same reason; "Already borrowed") and because on a small
    machine counting should not take more than one core from the engine. Every use of the
    tokenizer holds `_lock`, so that a short prompt may be counted on the event loop's thread
    (`count_inline`) when that thread is idle, without a second tokenizer in memory.
    """

    def __init__(self, tokenizer: Any, template: str | None, max_token_id: int) -> None:
        self._tokenizer = tokenizer
        self._template = template
        self._format: ContentFormat = (
            detect_content_format(parse_template(template)) if template else "string"
        )
        self.max_token_id = max_token_id
        self.max_chars_per_token = max(len(t) for t in tokenizer.get_vocab())
        self.bound: ByteBound | None = _bound_of(tokenizer)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "llmd-tokenizer")
        self._lock = threading.Lock()
        self._closed = False

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

    def close(self) -> None:
        """Release the tokenizer thread once the counts queued on it are done. A reload or a
        deploy may replace this counter while requests that took it have yet to ask for their
        count: those are counted on a thread of their own."""
        self._closed = True
        self._executor.shutdown(wait=False)

    def can_count(self, prompt: Counted) -> TypeGuard[Renderable]:
        """Whether this counter renders `prompt` exactly as the engine does."""
        if isinstance(prompt, EnginePrompt):
            return False
        if isinstance(prompt, TextPrompt):
            return True
        return prompt.local and self._template is not None

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

    async def count(self, prompt: Renderable, limit: int | None = None) -> list[int]:
        """Prompt tokens per sequence (one per completion prompt), on the tokenizer thread.

        A text longer than `limit` tokens could possibly be is not tokenized: it counts as
        `AtLeast` its characters over the longest token's (more than `limit`; vLLM 0.32 refuses
        it the same way, `TokenizeParams._text_len_check`). Raises InvalidRequest (naming the
        field) when the chat template or the tokenizer refuses the input.
        """
        return await self._on_thread(lambda p: self.count_now(p, limit), prompt)

    def count_inline(self, prompt: Renderable, limit: int | None = None) -> list[int] | None:
        """Prompt tokens per sequence on the calling thread (the event loop's), or None, at
        once, when the tokenizer is in use on another thread (then count on it, `count`).

        For short prompts only: the caller keeps the loop's time bounded (tens to hundreds of
        µs for a prompt of a few hundred characters); it saves the hand-off to the tokenizer
        thread and back (two wake-ups, and the wait for the GIL while the loop holds it). Raises
        as `count`."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._count(prompt, limit)
        finally:
            self._lock.release()

    def count_now(self, prompt: Renderable, limit: int | None = None) -> list[int]:
        """Prompt tokens per sequence, on the calling thread (blocking); see `count`."""
        with self._lock:
            return self._count(prompt, limit)

    def _count(self, prompt: Renderable, limit: int | None) -> list[int]:
        if isinstance(prompt, TextPrompt):
            return [
                len(p)
                if isinstance(p, list)
                else self._encode(p, prompt.add_special_tokens, limit, prompt.param)
                for p in prompt.prompts
            ]
        return [self._encode(self.render(prompt), prompt.add_special_tokens, limit, "messages")]

    async def tokenize(self, prompt: Renderable) -> list[int]:
        """The token ids of `prompt`'s first text (a chat: its rendered template), as vLLM
        0.32's /tokenize gives them, on the tokenizer thread. Raises InvalidRequest as
        `count`."""
        return await self._on_thread(self._ids, prompt)

    async def detokenize(self, ids: list[int]) -> tuple[str, list[str]]:
        """The text of `ids` (`tokenizer.decode`, special tokens kept: vLLM 0.32's
        /detokenize, renderers/base.py `_detokenize_prompt`) and each id's token string
        (`convert_ids_to_tokens`, its /tokenize's `token_strs`)."""
        return await self._on_thread(self._decode, ids)

    def _ids(self, prompt: Renderable) -> list[int]:
        with self._lock:
            if isinstance(prompt, TextPrompt):
                first = prompt.prompts[0]
                text = first if isinstance(first, str) else None
                if text is None:
                    return list(first)  # type: ignore[arg-type]
            else:
                text = self.render(prompt)
            try:
                ids: list[int] = self._tokenizer(
                    text, add_special_tokens=prompt.add_special_tokens
                )["input_ids"]
            except Exception as exc:
                raise InvalidRequest(
                    f"the tokenizer refused the {prompt.param}: {type(exc).__name__}: {exc}",
                    param=prompt.param,
                ) from exc
            return ids

    def _decode(self, ids: list[int]) -> tuple[str, list[str]]:
        with self._lock:
            text: str = self._tokenizer.decode(ids)
            strs: list[str] = self._tokenizer.convert_ids_to_tokens(ids)
            return text, strs

    async def _on_thread(self, call: Callable[[Any], T], arg: Any) -> T:
        """`call(arg)` on the tokenizer thread (a thread of its own once closed)."""
        if self._closed:
            return await asyncio.to_thread(call, arg)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call, arg)

    def render(self, prompt: ChatPrompt) -> str:
        """The chat template applied to `prompt`, as text (vLLM 0.32 `safe_apply_chat_template`).
        Raises InvalidRequest when the template refuses the messages."""
        assert self._template is not None
        extra = {k: v for k, v in prompt.template_kwargs.items() if k not in _HF_PARAMS}
        try:
            conversation = build_conversation(prompt.messages, self._format, self._template)
            text: str = self._tokenizer.apply_chat_template(
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

    def _encode(self, text: str, add_special_tokens: bool, limit: int | None, field: str) -> int:
        """Tokens in `text` (from request field `field`). Raises InvalidRequest when the
        tokenizer refuses it (vLLM answers such input with 400 too)."""
        longest = self.max_chars_per_token
        if limit is not None and len(text) > limit * longest:
            # Every token is at most `longest` characters long: the count is at least this.
            return AtLeast(-(-len(text) // longest))
        try:
            ids = self._tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        except Exception as exc:
            raise InvalidRequest(
                f"the tokenizer refused the {field}: {type(exc).__name__}: {exc}", param=field
            ) from exc
        return len(ids)


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
