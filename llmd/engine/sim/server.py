"""The HTTP surface: vLLM's OpenAI server routes (0.32's, or 0.31's: `Surface`) over the
simulated engine (Starlette on uvicorn, as vLLM serves): health, models, metrics, tokenizer,
then the routes the model's tasks register (tasks.py): generation here, pooling, scoring
and audio in their modules.

Handlers are cancelled when their client disconnects (asgi.py), and a cancelled
request aborts its engine requests at once, as vLLM does. Faults armed by flag, header
(`x-sim-fault`) or body field (`sim_fault`) are applied here (`admit`) for every endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from llmd.engine.sim import errors
from llmd.engine.sim.asgi import (
    SSE_HEADERS,
    Answer,
    EventStream,
    Handler,
    Routes,
    SimRequest,
)
from llmd.engine.sim.choices import choice_updates, stream_choices
from llmd.engine.sim.core import RequestState, SimEngine
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.faults import FaultOptions, FaultSpecError, RequestFault, sse_relayout
from llmd.engine.sim.metrics import CONTENT_TYPE, SimMetrics
from llmd.engine.sim.requests import parse_generation, parse_json_object
from llmd.engine.sim.responses import DONE, ResponseWriter, drop_connection, dumps, json_response
from llmd.engine.sim.sleep import SleepRoutes
from llmd.engine.sim.surface import DEFAULT_VERSION, SURFACES, Surface
from llmd.engine.sim.tasks import ModelTasks
from llmd.engine.sim.tokenizer import SimTokenizer
from llmd.engine.sim.tokens import TokenRoutes

if TYPE_CHECKING:
    from llmd.engine.sim.messages_api import MessagesAPI
    from llmd.engine.sim.pooling_requests import PromptContext
    from llmd.engine.sim.responses_api import ResponsesApi

log = logging.getLogger("vllm.entrypoints.openai.api_server")
_GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


class SimServer:
    """Routes and per-request fault handling around one `SimEngine`."""

    def __init__(
        self,
        *,
        engine: SimEngine,
        tokenizer: SimTokenizer,
        metrics: SimMetrics,
        model_name: str,
        model_root: str,
        max_model_len: int,
        faults: FaultOptions,
        on_exit: Callable[[int], None] | None = None,
        aliases: tuple[str, ...] = (),
        lora_modules: dict[str, str] | None = None,
        api_keys: tuple[str, ...] = (),
        surface: Surface = SURFACES[DEFAULT_VERSION],
        tasks: ModelTasks | None = None,
        vocab_size: int = 0,
        sleep: SleepRoutes | None = None,
    ) -> None:
        self.engine = engine
        self.sleep = sleep  # the dev-mode sleep routes (None: VLLM_SERVER_DEV_MODE unset)
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.model_name = model_name
        self.aliases = aliases or (model_name,)
        self.lora_modules = lora_modules or {}
        self.api_keys = api_keys
        self.model_root = model_root
        self.max_model_len = max_model_len
        self.faults = faults
        self.request_fault = RequestFault.parse(faults.request)
        self.on_exit = on_exit or _hard_exit
        self.surface = surface
        self.tasks = tasks or ModelTasks()
        self.vocab_size = vocab_size
        self.generation_requests = 0
        self.created = int(time.time())
        self._rng = random.Random(0)

    def app(self) -> Routes:
        """The ASGI app serving this server's routes."""
        app = Routes()
        if self.api_keys:
            app.guard = self._authenticate
        app.add_get("/health", self.health)
        app.add_get("/version", self.version)
        app.add_get("/v1/models", self.models)
        app.add_get("/metrics", self.metrics_text)
        TokenRoutes(self).add_to(app)
        if self.tasks.generates:
            app.add_post("/v1/chat/completions", self._generation("chat"))
            app.add_post("/v1/completions", self._generation("completion"))
            # The Messages and Responses APIs are imported at their first request (about 0.01
            # CPU-s of each start: the fast suite's simulators seldom serve them).
            app.add_post("/v1/messages", lambda request: self.messages_api.create(request))
            app.add_post(
                "/v1/messages/count_tokens", lambda request: self.messages_api.count_tokens(request)
            )
            app.add_post("/v1/responses", lambda request: self.responses_api.create(request))
        # The other runners' routes are imported only where served: for a generating model
        # that saves about 0.015 CPU-s of each simulator start (median of 9, 2-core host).
        if self.tasks.pooling_task is not None:
            from llmd.engine.sim.pooling import PoolingRoutes

            PoolingRoutes(self).add_to(app)
        if self.tasks.score_type is not None:
            from llmd.engine.sim.scoring import ScoringRoutes

            ScoringRoutes(self).add_to(app)
        if self.tasks.asr:
            from llmd.engine.sim.audio import AudioRoutes

            AudioRoutes(self).add_to(app)
        if self.sleep is not None:
            self.sleep.add_to(app)
        if runtime_lora_updating():
            app.add_post("/v1/load_lora_adapter", self.load_lora_adapter)
        return app

    @functools.cached_property
    def messages_api(self) -> MessagesAPI:
        """The Messages handlers (`/v1/messages`, `/v1/messages/count_tokens`), made once."""
        from llmd.engine.sim.messages_api import MessagesAPI

        return MessagesAPI(self)

    @functools.cached_property
    def responses_api(self) -> ResponsesApi:
        """The Responses handler (`/v1/responses`), made once."""
        from llmd.engine.sim.responses_api import ResponsesApi

        return ResponsesApi(self)

    @functools.cached_property
    def prompt_context(self) -> PromptContext:
        """What reading a pooling, scoring or audio body needs of the server, made once."""
        from llmd.engine.sim.pooling_requests import PromptContext

        return PromptContext(
            tokenizer=self.tokenizer,
            max_model_len=self.max_model_len,
            tasks=self.tasks,
            model_name=self.model_name,
            vocab_size=max(self.vocab_size, self.tokenizer.vocab_size),
            serves=lambda name: name in self.aliases or name in self.lora_modules,
            adapter=lambda name: name in self.lora_modules,
        )

    async def load_lora_adapter(self, request: SimRequest) -> Response:
        """vLLM 0.32's `POST /v1/load_lora_adapter` (serve/lora/api_router.py, only with
        VLLM_ALLOW_RUNTIME_LORA_UPDATING): `{"lora_name", "lora_path"}` joins the served names
        (listed by /v1/models from then on; not applied to the output); 200 with vLLM's text."""
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return JSONResponse(
                {"error": {"message": "lora_name and lora_path are required", "code": 400}},
                status_code=400,
            )
        self.lora_modules[name] = path
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def health(self, request: SimRequest) -> Response:
        """200 with an empty body while the engine lives; 503 once it is dead (vLLM 0.32)."""
        return Response(status_code=503 if self.engine.dead else 200)

    async def version(self, request: SimRequest) -> Response:
        return JSONResponse({"version": self.surface.version})

    def _authenticate(self, request: Request) -> Response | None:
        """vLLM 0.32's `--api-key` (serve/middleware/authenticate.py): a bearer key on every
        path under /v1, /v2, /inference, /cohere but OPTIONS; else 401 `{"error":
        "Unauthorized"}`."""
        if request.method != "OPTIONS" and request.url.path.startswith(_GUARDED_PREFIXES):
            scheme, _, key = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or key not in self.api_keys:
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return None

    async def models(self, request: SimRequest) -> Response:
        """Every served name, then every LoRA adapter (parent: the first name), as vLLM."""
        cards = [self._card(name, self.model_root, None) for name in self.aliases]
        cards += [
            self._card(name, path, self.model_name) for name, path in self.lora_modules.items()
        ]
        return json_response(dumps({"object": "list", "data": cards}))

    def _card(self, name: str, root: str, parent: str | None) -> dict[str, object]:
        return {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": self.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{secrets.token_hex(8)}",
                    "object": "model_permission",
                    "created": self.created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }

    async def metrics_text(self, request: SimRequest) -> Response:
        return Response(self.metrics.render(), headers={"content-type": CONTENT_TYPE})

    def _generation(self, kind: Literal["chat", "completion"]) -> Handler:
        async def handler(request: SimRequest) -> Answer:
            return await self._generate(kind, request)

        return handler

    async def _generate(self, kind: Literal["chat", "completion"], request: SimRequest) -> Answer:
        try:
            body = parse_json_object(await request.body())
            self.check_model(body.get("model"))
            parsed = parse_generation(kind, body, self.tokenizer, self.max_model_len, self.surface)
        except SimHTTPError as error:
            return error.response()
        admitted = await self.admit(request, parsed.sim_fault, generation=True)
        if not isinstance(admitted, RequestFault):
            return admitted
        fault = admitted
        # One engine request a choice (vLLM 0.32's parallel sampling), sharing one wake-up.
        changed = asyncio.Event() if parsed.n > 1 else None
        sent_id = request.headers.get("x-request-id", "")
        try:
            states = [
                self.engine.submit(parsed, fault, sent_id, choice=i, changed=changed)
                for i in range(parsed.n)
            ]
        except SimHTTPError as error:
            return error.response()
        request_id = request.headers.get("x-request-id") or secrets.token_hex(8)
        answered_as = body.get("model") if body.get("model") in self.lora_modules else None
        writer = ResponseWriter(states, answered_as or self.model_name, request_id)
        try:
            if parsed.stream:
                if parsed.n > 1:
                    stream = (_Relayout if self.faults.sse_layout else EventStream)(
                        request, SSE_HEADERS
                    )
                    try:
                        return await stream_choices(stream, states, writer)
                    except SimHTTPError as error:  # before the first byte
                        return error.response()
                return await self._stream(request, states[0], writer)
            return await self._complete(request, states, writer)
        finally:
            for state in states:  # no-op when it finished; frees seat and blocks otherwise
                self.engine.abort(state)

    async def admit(
        self,
        request: SimRequest,
        body_fault: str,
        *,
        generation: bool = False,
        answer: Callable[[SimHTTPError], Response] = SimHTTPError.response,
    ) -> RequestFault | Answer:
        """A checked request on its way to the engine: its faults (`--fault-request`, then the
        x-sim-fault header or else the body's `sim_fault`), or the answer a fault gives it
        now (an error, in the shape `answer` gives it; a dropped connection). `delay` is
        waited here; `empty` (by rate too) only applies to `generation`."""
        try:
            spec = request.headers.get("x-sim-fault", "") or body_fault
            fault = self.request_fault.merged(RequestFault.parse(spec))
            self._process_faults(fault)
        except FaultSpecError as exc:
            return answer(errors.bad_request(str(exc), "x-sim-fault"))
        except SimHTTPError as error:
            return answer(error)
        if generation and self.faults.empty_rate and self._rng.random() < self.faults.empty_rate:
            fault = dataclasses.replace(fault, empty=True)
        if fault.die_after == 0:
            return drop_connection(request)
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        return fault

    def _process_faults(self, fault: RequestFault) -> None:
        """Faults that strike as the request arrives; raises the error to answer, if any."""
        self.generation_requests += 1
        f = self.faults
        if fault.crash or (f.crash_after is not None and self.generation_requests > f.crash_after):
            log.error("Simulated crash after %d requests.", self.generation_requests - 1)
            self.on_exit(f.crash_exit_code)
        if fault.dead or (f.dead_after is not None and self.generation_requests > f.dead_after):
            self.kill_engine()
        if fault.stall and self.engine.stall_at is None:
            self.engine.stall_at = self.engine.clock()
        if self.engine.dead:
            raise errors.engine_dead()
        if fault.error_status is not None:
            raise errors.injected(fault.error_status)
        if f.error_rate and self._rng.random() < f.error_rate:
            raise errors.injected(f.error_status)

    def kill_engine(self) -> None:
        """The engine dies; with `--fault-exit-on-death S` the process exits 0 after S seconds,
        as vLLM's watchdog ends the API server (vllm#48966)."""
        if self.engine.dead:
            return
        self.engine.die()
        if self.faults.exit_on_death is not None:
            loop = asyncio.get_running_loop()
            loop.call_later(self.faults.exit_on_death, self._watchdog_exit)

    def _watchdog_exit(self) -> None:
        log.error("Engine core is dead; shutting down the API server.")
        self.on_exit(0)

    async def _complete(
        self, request: SimRequest, states: list[RequestState], writer: ResponseWriter
    ) -> Answer:
        state = states[0]
        try:
            async for _ in state.updates() if len(states) == 1 else choice_updates(states):
                pass
        except SimHTTPError as error:
            return error.response()
        if state.fault.die_after is not None:
            return drop_connection(request)
        return json_response(writer.full_body())

    async def _stream(
        self, request: SimRequest, state: RequestState, writer: ResponseWriter
    ) -> Answer:
        response = (_Relayout if self.faults.sse_layout else EventStream)(request, SSE_HEADERS)
        die_after = state.fault.die_after
        started = False
        end = 0
        finish_sent = False
        try:
            async for start, end in state.updates():
                if not started:
                    await response.start()
                    started = True
                    if writer.chat:
                        await response.write(writer.role_chunk())
                if die_after is not None and end >= die_after:
                    end = min(end, start + max(0, die_after - start))
                    if end > start:
                        await response.write(writer.token_chunk(start, end))
                    drop_connection(request)
                    return response
                finish_sent = state.finish_reason is not None
                await response.write(writer.token_chunk(start, end))
        except SimHTTPError as error:
            if not started:
                return error.response()
            await response.write(b"data: " + error.json_bytes() + b"\n\n" + DONE)
            await response.end()
            return response
        if started and not finish_sent and state.finish_reason is not None:
            # The request ended after its last token's chunk was written: the finish reason
            # goes in a chunk of its own, with no text, as vLLM sends it then.
            await response.write(writer.token_chunk(end, end))
        if state.request.include_usage:
            await response.write(writer.usage_chunk())
        await response.write(DONE)
        await response.end()
        return response

    def check_model(self, name: object) -> None:
        """Raises vLLM 0.32's 404 when `name` (a request's `model`) is served under no name."""
        if name is not None and name not in self.aliases and name not in self.lora_modules:
            raise errors.model_not_found(
                str(name), ", ".join(self.aliases), self.surface.names_models
            )


class _Relayout(EventStream):
    """A stream whose events are written in another valid layout (`--fault-sse-layout`)."""

    _events = 0

    async def write(self, data: bytes) -> None:
        chunk = data
        await super().write(sse_relayout(chunk, self._events))
        self._events += chunk.count(b"\n\n")


def _hard_exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def runtime_lora_updating() -> bool:
    """Whether VLLM_ALLOW_RUNTIME_LORA_UPDATING is on, read as vLLM 0.32's envs.py reads it."""
    return os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")
