"""The HTTP surface: vLLM's OpenAI server routes (0.32's, or 0.31's: `Surface`) over the
simulated engine (aiohttp).

Handlers are cancelled when their client disconnects (`handler_cancellation`), and a cancelled
generation aborts its engine request at once, as vLLM does. Faults armed by flag, header
(`x-sim-fault`) or body field (`sim_fault`) are applied here, on the request's way in and out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from aiohttp import web

from llmd.engine.sim import errors, messages_api
from llmd.engine.sim.core import RequestState, SimEngine
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.faults import FaultOptions, FaultSpecError, RequestFault
from llmd.engine.sim.metrics import CONTENT_TYPE, SimMetrics
from llmd.engine.sim.requests import (
    GenerationRequest,
    parse_generation,
    parse_json_object,
    parse_tokenize,
)
from llmd.engine.sim.responses import DONE, ResponseWriter, dumps
from llmd.engine.sim.surface import DEFAULT_VERSION, SURFACES, Surface
from llmd.engine.sim.tokenizer import SimTokenizer

log = logging.getLogger("vllm.entrypoints.openai.api_server")
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}
JSON = "application/json"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
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
    ) -> None:
        self.engine = engine
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
        self.generation_requests = 0
        self.created = int(time.time())
        self._rng = random.Random(0)

    def app(self) -> web.Application:
        middlewares = [_fastapi_errors, *([self._authenticate] if self.api_keys else [])]
        app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/chat/completions", self._generation("chat"))
        app.router.add_post("/v1/completions", self._generation("completion"))
        messages_api.register(app, self)
        if runtime_lora_updating():
            app.router.add_post("/v1/load_lora_adapter", self.load_lora_adapter)
        return app

    async def load_lora_adapter(self, request: web.Request) -> web.Response:
        """vLLM 0.32's `POST /v1/load_lora_adapter` (serve/lora/api_router.py, only with
        VLLM_ALLOW_RUNTIME_LORA_UPDATING): `{"lora_name", "lora_path"}` joins the served names
        (listed by /v1/models from then on; not applied to the output); 200 with vLLM's text."""
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return web.json_response(
                {"error": {"message": "lora_name and lora_path are required", "code": 400}},
                status=400,
            )
        self.lora_modules[name] = path
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def health(self, request: web.Request) -> web.Response:
        """200 with an empty body while the engine lives; 503 once it is dead (vLLM 0.32)."""
        return web.Response(status=503 if self.engine.dead else 200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.surface.version})

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """vLLM 0.32's `--api-key` (serve/middleware/authenticate.py): a bearer key on every
        path under /v1, /v2, /inference, /cohere but OPTIONS; else 401 `{"error":
        "Unauthorized"}`."""
        if request.method != "OPTIONS" and request.path.startswith(_GUARDED_PREFIXES):
            scheme, _, key = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or key not in self.api_keys:
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def models(self, request: web.Request) -> web.Response:
        """Every served name, then every LoRA adapter (parent: the first name), as vLLM."""
        cards = [self._card(name, self.model_root, None) for name in self.aliases]
        cards += [
            self._card(name, path, self.model_name) for name, path in self.lora_modules.items()
        ]
        return _json(dumps({"object": "list", "data": cards}))

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

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"content-type": CONTENT_TYPE})

    async def tokenize(self, request: web.Request) -> web.Response:
        """`{"count", "max_model_len", "tokens", "token_strs"}`; no context-length check."""
        try:
            body = parse_json_object(await request.read())
            self._check_model(body.get("model"))
            ids = parse_tokenize(body, self.tokenizer)
        except SimHTTPError as error:
            return _error(error)
        strs = self.tokenizer.token_strs(ids) if body.get("return_token_strs") else None
        return _json(
            dumps(
                {
                    "count": len(ids),
                    "max_model_len": self.max_model_len,
                    "tokens": ids,
                    "token_strs": strs,
                }
            )
        )

    def _generation(self, kind: Literal["chat", "completion"]) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self._generate(kind, request)

        return handler

    async def _generate(
        self, kind: Literal["chat", "completion"], request: web.Request
    ) -> web.StreamResponse:
        try:
            body = parse_json_object(await request.read())
            self._check_model(body.get("model"))
            parsed = parse_generation(kind, body, self.tokenizer, self.max_model_len, self.surface)
            fault = self.request_fault.merged(
                RequestFault.parse(request.headers.get("x-sim-fault", "") or parsed.sim_fault)
            )
        except FaultSpecError as exc:
            return _error(errors.bad_request(str(exc), "x-sim-fault"))
        except SimHTTPError as error:
            return _error(error)
        try:
            state = await self.admit(request, parsed, fault)
        except SimHTTPError as error:
            return _error(error)
        if state is None:
            return web.Response(status=500)
        request_id = request.headers.get("x-request-id") or secrets.token_hex(8)
        answered_as = body.get("model") if body.get("model") in self.lora_modules else None
        writer = ResponseWriter(state, answered_as or self.model_name, request_id)
        try:
            if parsed.stream:
                return await self._stream(request, state, writer)
            return await self._complete(request, state, writer)
        finally:
            self.engine.abort(state)  # no-op when it finished; frees seat and blocks otherwise

    async def admit(
        self, request: web.Request, parsed: GenerationRequest, fault: RequestFault
    ) -> RequestState | None:
        """Apply the faults that strike on arrival, then queue `parsed` in the engine: its
        state, or None when the connection was cut (`die-after:0`). Raises `SimHTTPError`."""
        self._process_faults(fault)
        if self.faults.empty_rate and self._rng.random() < self.faults.empty_rate:
            fault = dataclasses.replace(fault, empty=True)
        if fault.die_after == 0:
            _drop_connection(request)
            return None
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        return self.engine.submit(parsed, fault, request.headers.get("x-request-id", ""))

    def _process_faults(self, fault: RequestFault) -> None:
        """Faults that strike as the request arrives; raises the error to answer, if any."""
        self.generation_requests += 1
        f = self.faults
        if fault.crash or (f.crash_after is not None and self.generation_requests > f.crash_after):
            log.error("Simulated crash after %d requests.", self.generation_requests - 1)
            self.on_exit(f.crash_exit_code)
        if fault.dead or (f.dead_after is not None and self.generation_requests > f.dead_after):
            self.kill_engine()
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
        self, request: web.Request, state: RequestState, writer: ResponseWriter
    ) -> web.StreamResponse:
        try:
            async for _ in state.updates():
                pass
        except SimHTTPError as error:
            return _error(error)
        if state.fault.die_after is not None:
            _drop_connection(request)
            return web.Response(status=500)
        return _json(writer.full_body())

    async def _stream(
        self, request: web.Request, state: RequestState, writer: ResponseWriter
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        die_after = state.fault.die_after
        started = False
        end = 0
        finish_sent = False
        try:
            async for start, end in state.updates():
                if not started:
                    await response.prepare(request)
                    started = True
                    if writer.chat:
                        await response.write(writer.role_chunk())
                if die_after is not None and end >= die_after:
                    end = min(end, start + max(0, die_after - start))
                    if end > start:
                        await response.write(writer.token_chunk(start, end))
                    _drop_connection(request)
                    return response
                finish_sent = state.finish_reason is not None
                await response.write(writer.token_chunk(start, end))
        except SimHTTPError as error:
            if not started:
                return _error(error)
            await response.write(b"data: " + error.json_bytes() + b"\n\n" + DONE)
            await response.write_eof()
            return response
        except ConnectionResetError:
            return response
        if started and not finish_sent and state.finish_reason is not None:
            # The request ended after its last token's chunk was written: the finish reason
            # goes in a chunk of its own, with no text, as vLLM sends it then.
            await response.write(writer.token_chunk(end, end))
        if state.request.include_usage:
            await response.write(writer.usage_chunk())
        await response.write(DONE)
        await response.write_eof()
        return response

    def _check_model(self, name: object) -> None:
        if name is not None and name not in self.aliases and name not in self.lora_modules:
            raise errors.model_not_found(
                str(name), ", ".join(self.aliases), self.surface.names_models
            )


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _error(error: SimHTTPError) -> web.Response:
    return _json(error.json_bytes(), status=error.status)


def _drop_connection(request: web.Request) -> None:
    """Cut the connection mid-response, as a dying engine process does."""
    transport = request.transport
    if transport is not None:
        transport.abort()


def _hard_exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@web.middleware
async def _fastapi_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes and methods answered as FastAPI does: `{"detail": ...}`."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.json_response({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed:
        return web.json_response({"detail": "Method Not Allowed"}, status=405)


def runtime_lora_updating() -> bool:
    """Whether VLLM_ALLOW_RUNTIME_LORA_UPDATING is on, read as vLLM 0.32's envs.py reads it."""
    return os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")
