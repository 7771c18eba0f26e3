"""The validation step of the proxy: one parsed body in, the body to relay (or an error) out.

Order: the fields llmd reads (400 `invalid_request`, also past `validation.max_n` or
`max_prompts`) → the model name (404; any name the engine serves, `models.py`) → prompt tokens,
counted as the engine will → the context check (400 `context_length_exceeded`, or a clamp).
The body is re-serialised only when llmd changed it (a clamp or a default max_tokens).

Counting is shared by every request in flight, so it is taken in turns by class (interactive
first, `turns.py`): one at a time on each of the local tokenizer's lanes, at most
`validation.max_tokenize_calls` at once on the engine's /tokenize. A body of more than
`lanes.LONG_BYTES` is long: counted on the long lane (locally), one at a time among those
slots (the engine's), so that no short count waits behind it. A request whose client left
while waiting its turn is never counted (its task is cancelled). A short body (at most
`INLINE_COUNT_BYTES`) is counted at once on the event loop when nobody holds or waits for the
short lane's turn: no request of any class waits behind it. A prompt the engine counts that
llmd renders as the engine does is refused untokenized when its text cannot fit
(`LocalCounter.rendered_at_least`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import structlog

from llmd.config import Config
from llmd.engine.args import flags_given
from llmd.engine.client import EngineClient
from llmd.engine.versions import EngineApi
from llmd.errors import EngineUnavailable, InvalidRequest
from llmd.quoting import header_text
from llmd.validation.context import (
    ContextDecision,
    Policy,
    check_context,
    fit_output,
    output_limit,
)
from llmd.validation.counter import (
    CountUnsupported,
    EngineCounter,
    LocalCounter,
    TokenizerUnavailable,
)
from llmd.validation.fields import (
    ChatPrompt,
    Counted,
    EnginePrompt,
    Fields,
    PairPrompt,
    TextPrompt,
    as_counted,
)
from llmd.validation.lanes import LONG_BYTES
from llmd.validation.turns import Turns

log = structlog.get_logger("llmd.validation")

# Engine arguments that change how vLLM renders or tokenizes prompts: with any of them the local
# tokenizer would count differently, so llmd counts through the engine instead.
ENGINE_RENDERING_ARGS = (
    "--tokenizer",
    "--tokenizer-mode",
    "--chat-template",
    "--chat-template-content-format",
    "--default-chat-template-kwargs",
)
# Bodies up to this size are counted on the event loop when the tokenizer thread is free: about
# 50 µs for a short prompt, at most about 0.6 ms of the loop's time for 1 KiB (the tiny model's
# tokenizer through transformers, measured here on a loaded machine), which spares the
# hand-off to the thread and back: two wake-ups and a wait for the GIL while the loop holds it
# (docs/bench/overhead.md, issue 20).
INLINE_COUNT_BYTES = 1024
POLICY_HEADER = b"x-llmd-context-policy"
CLAMPED_HEADER = b"x-llmd-max-tokens-clamped"


class ContextSource(Protocol):
    """Where the model's context length comes from (an engine's state, a pool's backends), and
    the vLLM release whose answers llmd mirrors for it (llmd/engine/versions.py)."""

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def api(self) -> EngineApi: ...


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What validation knows of one served model: its `name`, the directory its tokenizer loads
    from (`tokenizer_path`; '': none here, count through a backend's /tokenize), and the engine
    args that change how prompts are rendered."""

    name: str
    tokenizer_path: str = ""
    engine_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Validated:
    """A request that may go to the engine: `body` (the client's bytes unless llmd changed
    them), `prompt_counts` (tokens of each prompt or input), the effective `max_tokens`
    (None: the engine's default, `OutputRequest.engine_default`), `n`, and headers for the
    client's response; `counted` False when nothing here could count the prompts (then
    `prompt_counts` are zeros, one per prompt); `exact` False when they are upper bounds
    (`Validator.check`'s `bounded`: the engine's usage gives the count).
    """

    body: bytes
    prompt_counts: tuple[int, ...]
    max_tokens: int | None
    n: int
    response_headers: list[tuple[bytes, bytes]]
    counted: bool = True
    exact: bool = True

    @property
    def prompt_tokens(self) -> int | None:
        """The longest prompt's tokens (None: not counted, `prompt_counts` are zeros)."""
        return max(self.prompt_counts) if self.counted else None


class Validator:
    """Validates generation requests for one model (one pool of backends); owns its prompt
    token counters. `engine` gives the context length; `client` a client of a backend
    serving the model (for its /tokenize)."""

    def __init__(
        self,
        config: Config,
        engine: ContextSource,
        client: Callable[[], EngineClient],
        model: ModelSource | None = None,
    ) -> None:
        self.engine = engine
        self.local: LocalCounter | None = None
        self.remote = EngineCounter(client)
        self.local_turns = Turns(1)  # the local tokenizer's short lane
        self.long_turns = Turns(1)  # its long lane
        self.remote_turns = Turns(config.validation.max_tokenize_calls)
        self.remote_long_turns = Turns(1)  # long counts take one of remote_turns at most
        self.loading: asyncio.Task[None] | None = None
        self._warned_no_limit = False
        self._warned_no_count = False
        self._tokenizer_source: tuple[object, ...] = ()
        self.configure(config, model)

    def configure(self, config: Config, model: ModelSource | None = None) -> None:
        """Take `config` (at start-up and on each reload) and the model's source (None: the
        single `[engine]`'s): the context policy and the output limits apply to the next
        request; a changed tokenizer setting (`validation.tokenizer`, the tokenizer path, or
        the engine's rendering args) loads the tokenizer again (`start_loading`; the old one
        counts until the new one is in)."""
        if model is None:
            engine = config.engine
            path = config.validation.tokenizer_path or engine.model
            model = ModelSource(engine.model_name, path, engine.args)
        self.config = config.validation
        self.remote_turns.resize(config.validation.max_tokenize_calls)
        self.served_models = [model.name]
        self.tokenizer_path = model.tokenizer_path
        self.engine_args = model.engine_args
        source = (config.validation.tokenizer, self.tokenizer_path, self.engine_args)
        changed, self._tokenizer_source = source != self._tokenizer_source, source
        if changed and self.loading is not None:  # loaded before: load again
            self.start_loading()

    def start_loading(self) -> asyncio.Task[None]:
        """Load the tokenizer for the current settings in a task (`loading`, replacing one
        under way). Needs a running event loop."""
        if self.loading is not None:
            self.loading.cancel()
        self.loading = asyncio.create_task(self.load_tokenizer(), name="tokenizer-load")
        return self.loading

    async def load_tokenizer(self) -> None:
        """Load the local tokenizer on a daemon thread; on failure, or when the settings say so,
        count through the engine (logged). The counter it replaces is closed. The thread is
        llmd's own, not the loop's executor: a stop that comes while it loads (seconds:
        importing transformers) does not wait for it."""
        local: LocalCounter | None = None
        given = flags_given(self.engine_args, ENGINE_RENDERING_ARGS)
        if self.config.tokenizer == "engine":
            log.info("tokenizer_engine", reason="validation.tokenizer = engine")
        elif not self.tokenizer_path:
            log.info("tokenizer_engine", model=self.served_models[0], reason="no local model")
        elif given and not self.config.tokenizer_path:
            log.warning("tokenizer_fallback_engine", reason="engine.args set " + ", ".join(given))
        else:
            started = time.monotonic()
            try:
                local = await _on_daemon_thread(LocalCounter.load, self.tokenizer_path)
            except TokenizerUnavailable as exc:
                log.warning("tokenizer_fallback_engine", path=self.tokenizer_path, reason=str(exc))
            else:
                log.info(
                    "tokenizer_loaded",
                    path=self.tokenizer_path,
                    seconds=round(time.monotonic() - started, 2),
                    chat_template=local.has_template,
                )
        old, self.local = self.local, local
        if old is not None:
            old.close()

    def close(self) -> None:
        """Stop a load under way and close the local tokenizer."""
        if self.loading is not None:
            self.loading.cancel()
        if self.local is not None:
            self.local.close()

    async def check(
        self,
        fields: Fields,
        payload: dict[str, Any],
        raw: bytes,
        headers: list[Any],
        rank: int = 0,
        *,
        bounded: bool = False,
        output_room: Callable[[int], int | None] | None = None,
    ) -> Validated:
        """Validate a request's `fields` (read from `payload`, its bytes `raw`, sent with ASGI
        `headers`); its prompt is counted in its class's turn (`rank`: 0 first). A clamp or a
        default max_tokens is written into `payload` and the bytes made again. With `bounded`
        (the caller takes the true count from the engine's answer), pooling inputs whose
        upper bounds (`LocalCounter.upper_bounds`) all fit the window are not tokenized: the
        bounds are the counts, `exact` False. `output_room(input_tokens)`: the most output its
        tenant's token budgets could ever hold (None: unbounded); an output limit past it is
        lowered to it where it may be (`fit_output`), said in x-llmd-max-tokens-clamped as a
        clamp to the window is. Raises ApiError."""
        policy = _policy(headers, self.config.context_policy)
        if fields.clamp:  # a protocol whose engine lowers an output budget past the window
            policy = "clamp"
        self._check_sizes(fields)
        max_model_len = self.engine.max_model_len
        prompt = as_counted(fields.prompt)
        self._check_token_ids(prompt)
        output = fields.output
        if bounded and not output.generates and fields.truncate_prompt_tokens is None:
            bounds = self._fitting_bounds(prompt, max_model_len)
            if bounds is not None:
                return Validated(raw, tuple(bounds), output.max_tokens, output.n, [], exact=False)
        counts = await self._count(prompt, fields.model, max_model_len, rank, len(raw))
        if not counts:  # nothing here can count them: the engine checks the context
            uncounted = (0,) * _prompts(prompt)
            return Validated(raw, uncounted, output.max_tokens, output.n, [], counted=False)
        if max_model_len is None:
            if not self._warned_no_limit:
                log.warning("context_check_skipped", reason="max_model_len unknown")
                self._warned_no_limit = True
            decision = ContextDecision()
        else:
            decision = check_context(
                counts, output, max_model_len, self.config, policy,
                fields.truncate_prompt_tokens, self.engine.api, prompt.param,
            )  # fmt: skip
        response_headers: list[tuple[bytes, bytes]] = []
        max_tokens, clamped_from = output.max_tokens, decision.clamped_from
        if decision.max_tokens is not None:
            payload[decision.field] = max_tokens = decision.max_tokens
        room = None if output_room is None else output_room(sum(counts))
        fitted = fit_output(counts, output, max_tokens, room, max_model_len, policy)
        if fitted is not None:  # lowered to what the tenant's budgets can hold
            if clamped_from is None:  # where the client and llmd set none: the engine's
                clamped_from = output_limit(counts, output, max_tokens, max_model_len)
            payload[output.field] = max_tokens = fitted
        if decision.max_tokens is not None or fitted is not None:
            raw = json.dumps(payload, separators=(",", ":")).encode()
        if clamped_from is not None:
            response_headers.append((CLAMPED_HEADER, f"{clamped_from}->{max_tokens}".encode()))
        return Validated(raw, tuple(counts), max_tokens, output.n, response_headers)

    async def count(
        self, fields: Fields, rank: int = 0, *, check: bool = False, size: int = 0
    ) -> int:
        """The prompt's tokens (its longest, for several prompts) as the engine will count
        them, in the class's turn (`rank`; `size`: the body's bytes, which lane counts it):
        by the local tokenizer, else by the engine (its /tokenize, or the prompt's own
        counting route), exactly however long it is; with `check`, refused past the window
        as vLLM refuses it. Raises InvalidRequest (the template or tokenizer refused it),
        ContextLengthExceeded (`check`), EngineUnavailable (503: the engine must count it
        and cannot now, or nothing here can)."""
        prompt = as_counted(fields.prompt)
        self._check_token_ids(prompt)
        max_model_len = self.engine.max_model_len if check else None
        size = max(size, INLINE_COUNT_BYTES + 1)  # never counted on the loop
        counts = await self._count(prompt, fields.model, max_model_len, rank, size)
        if not counts:
            raise EngineUnavailable(
                "llmd cannot count this prompt: no local tokenizer renders it and the "
                "backend has no /tokenize",
                retry_after_s=60,
            )
        if max_model_len is not None:
            check_context(
                counts, fields.output, max_model_len, self.config, "reject",
                api=self.engine.api, prompt_param=prompt.param,
            )  # fmt: skip
        return int(max(counts))

    async def tokenize(
        self, fields: Fields, rank: int = 0, *, size: int = 0
    ) -> dict[str, Any] | None:
        """vLLM 0.32's /tokenize answer (`count`, `max_model_len`, `tokens`, `token_strs`
        when `return_token_strs`) from the local tokenizer, however long the prompt (vLLM's
        /tokenize counts past the window too), in the class's turn (`rank`) on the lane the
        body's bytes (`size`) choose; None when the engine must answer (no local tokenizer, a
        prompt it does not render, the context length not known yet). Raises
        InvalidRequest."""
        local, prompt = self.local, as_counted(fields.prompt)
        max_model_len = self.engine.max_model_len
        if local is None or not local.can_count(prompt) or max_model_len is None:
            return None
        long = size > LONG_BYTES
        async with self._local_turns(long).turn(rank):
            ids = await local.tokenize(prompt, long=long)
            strs = (await local.detokenize(ids, long=long))[1] if fields.token_strs else None
        return {
            "count": len(ids),
            "max_model_len": max_model_len,
            "tokens": ids,
            "token_strs": strs,
        }

    async def detokenize(
        self, fields: Fields, rank: int = 0, *, size: int = 0
    ) -> dict[str, Any] | None:
        """vLLM 0.32's /detokenize answer (`prompt`: the text of the ids) from the local
        tokenizer, in the class's turn on the lane the body's bytes (`size`) choose; None when
        the engine must answer. Raises InvalidRequest for an id past the vocabulary."""
        local, prompt = self.local, as_counted(fields.prompt)
        if local is None or not isinstance(prompt, TextPrompt):
            return None
        self._check_token_ids(prompt)
        ids = prompt.prompts[0]
        assert isinstance(ids, list)
        long = size > LONG_BYTES
        async with self._local_turns(long).turn(rank):
            text, _ = await local.detokenize(ids, long=long)
        return {"prompt": text}

    def _check_sizes(self, fields: Fields) -> None:
        """`n` and the number of prompts within this server's limits. Raises InvalidRequest."""
        n, limit = fields.output.n, self.config.max_n
        if limit and n > limit:
            raise InvalidRequest(
                f"'n' is {n}, over this server's limit of {limit} sequences per prompt",
                param="n",
            )
        prompt, limit = fields.prompt, self.config.max_prompts
        count = len(prompt.pairs) if isinstance(prompt, PairPrompt) else len(fields.texts)
        if limit and count > limit:
            raise InvalidRequest(
                f"'{prompt.param}' holds {count} prompts, over this server's limit of "
                f"{limit} per request",
                param=prompt.param,
            )

    async def _count(
        self,
        prompt: Counted,
        model: str | None,
        limit: int | None,
        rank: int,
        size: int,
    ) -> list[int]:
        """Tokens per prompt, counted in turn on the lane the body's bytes (`size`) choose:
        locally when the tokenizer renders it as the engine does (a short one at once on the
        loop when the short lane's turn is free), else by a backend's /tokenize, unless its
        text rendered here cannot fit `limit` (`_bound`); none when nothing here can count
        them (inputs llmd does not read, such as images; or the backend has no /tokenize and
        no local tokenizer is loaded): then the engine checks the context."""
        if isinstance(prompt, TextPrompt) and not prompt.local:
            return []
        local, here, long = self.local, self._rendered(prompt), size > LONG_BYTES
        if local is not None and local.can_count(here):
            if size <= INLINE_COUNT_BYTES and self.local_turns.busy == 0:  # nobody in line
                counts = local.count_inline(here, limit)
                if counts is not None:
                    return counts
            async with self._local_turns(long).turn(rank):
                return await local.count(here, limit, long=long)
        if local is not None and limit is not None and local.can_bound(here):
            bound = await self._bound(local, here, limit, rank, long)
            if bound is not None:
                return [bound]
        ids_only = isinstance(prompt, TextPrompt) and all(
            isinstance(p, list) for p in prompt.prompts
        )
        try:
            if ids_only:
                return await self.remote.count(prompt, model)  # token ids: counted without a call
            async with contextlib.AsyncExitStack() as turns:
                if long:  # one long count at a time: the other slots stay for short ones
                    await turns.enter_async_context(self.remote_long_turns.turn(rank))
                await turns.enter_async_context(self.remote_turns.turn(rank))
                return await self.remote.count(prompt, model)
        except CountUnsupported as exc:
            if not self._warned_no_count:
                log.warning("context_check_skipped", model=model, reason=str(exc))
                self._warned_no_count = True
            return []

    def _local_turns(self, long: bool) -> Turns:
        """The turns of the local tokenizer's long lane, or of its short one."""
        return self.long_turns if long else self.local_turns

    async def _bound(
        self, local: LocalCounter, prompt: ChatPrompt, limit: int, rank: int, long: bool
    ) -> int | None:
        """`LocalCounter.rendered_at_least` of a prompt the engine counts, in turn on its
        lane; None when it may fit, or when the template refuses it here (the engine's answer
        then says why)."""
        try:
            async with self._local_turns(long).turn(rank):
                return await local.rendered_at_least(prompt, limit, long=long)
        except InvalidRequest:
            return None

    def _fitting_bounds(self, prompt: Counted, max_model_len: int | None) -> list[int] | None:
        """Upper bounds of the inputs' tokens when each is within `max_model_len` (so the
        context check needs no count), else None."""
        local = self.local
        if local is None or max_model_len is None or not isinstance(prompt, TextPrompt):
            return None
        if not prompt.local or not prompt.prompts:
            return None
        bounds = local.upper_bounds(prompt)
        return bounds if bounds is not None and max(bounds) <= max_model_len else None

    def _rendered(self, prompt: Counted) -> Counted:
        """`prompt` as llmd's tokenizer may count it: a prompt the engine counts, as llmd
        renders it when it can and the engine takes it (its `requires` flags given)."""
        if not isinstance(prompt, EnginePrompt) or prompt.rendered is None:
            return prompt
        given = set(flags_given(self.engine_args, prompt.requires))
        return prompt.rendered if len(given) == len(prompt.requires) else prompt

    def _check_token_ids(self, prompt: Counted) -> None:
        """Token ids past the vocabulary: 400, as vLLM 0.32 answers (`renderers/base.py`)."""
        if self.local is None or not isinstance(prompt, TextPrompt):
            return
        for p in prompt.prompts:
            if isinstance(p, list) and p and max(p) > self.local.max_token_id:
                raise InvalidRequest(f"Token id {max(p)} is out of vocabulary", param=prompt.param)


def _policy(headers: list[Any], default: Policy) -> Policy:
    """The context policy: the request's `x-llmd-context-policy` header (in any case, as
    `x-llmd-priority` is read), else the config's. Raises InvalidRequest (400, `param` the
    header) for another value."""
    for name, value in headers:
        if name == POLICY_HEADER:
            policy = value.strip().lower()
            if policy == b"reject":
                return "reject"
            if policy == b"clamp":
                return "clamp"
            raise InvalidRequest(
                "header x-llmd-context-policy must be 'reject' or 'clamp', "
                f"got {header_text(value)}",
                param=POLICY_HEADER.decode(),
            )
    return default


T = TypeVar("T")


async def _on_daemon_thread(call: Callable[[str], T], arg: str) -> T:
    """`call(arg)` on a new daemon thread, awaited. Unlike `asyncio.to_thread`, neither the
    loop's shutdown nor the interpreter's exit waits for it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():  # the awaiting task was cancelled
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = call(arg), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="tokenizer-load", daemon=True).start()
    return await done


def _prompts(prompt: Counted) -> int:
    """How many prompts the request holds (chat: one)."""
    return len(prompt.prompts) if isinstance(prompt, TextPrompt) else 1
