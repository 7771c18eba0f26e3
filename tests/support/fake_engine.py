"""A fake engine you can observe, and llmd's proxy in front of it, both on real sockets.

`ProxyStack` runs, on a thread with its own event loop: an aiohttp app on a Unix socket that
answers the generation routes and records every body it receives, and llmd's proxy app under
uvicorn on a free TCP port. Tests talk to it with any HTTP client (streaming works).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from aiohttp import web

from llmd.config import AdmissionConfig, Config, EngineConfig, ServerConfig, ValidationConfig
from llmd.engine.versions import EngineApi
from llmd.proxy.app import build_app
from llmd.state import DaemonState
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.telemetry.observer import Observer
from tests.support.state import daemon_state


@dataclasses.dataclass
class FakeEngine:
    """What the fake engine saw: (path, parsed body) for each generation request, and the
    bodies of its /tokenize calls in the order they came (`tokenized`) with the most that ran
    at once (`tokenizing_peak`). `tokenize_delay_s` slows each /tokenize call; `linger_s` keeps
    a stream open that long after its `data: [DONE]`; while `hold` is clear, generation
    requests wait (once received) until a test sets it, and while `tokenize_hold` is clear,
    /tokenize calls do.

    A streamed request with `"hold_tail": true` gets its stream less the last byte (the `\n`
    that ends the last event), which follows once `tail` is set; one with `"cut_after_done":
    true` has its connection reset after its `[DONE]`, before the chunked body's end.
    `transports` holds the connection of each generation request, in order (one object per
    connection)."""

    received: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    tokenized: list[Any] = dataclasses.field(default_factory=list)
    tokenizing: int = 0
    tokenizing_peak: int = 0
    tokenize_delay_s: float = 0.0
    linger_s: float = 0.0
    hold: threading.Event | None = None
    tokenize_hold: threading.Event | None = None
    tail: asyncio.Event | None = None
    transports: list[Any] = dataclasses.field(default_factory=list)
    # The routes it registers beside chat, completions and /tokenize (vLLM registers the
    # pooling ones only for a pooling runner); any other path gets FastAPI's 404.
    pooling_paths: tuple[str, ...] = ()
    # What each audio request sent: (path, its Content-Type, its raw bytes).
    forms: list[tuple[str, str, bytes]] = dataclasses.field(default_factory=list)
    # The headers of each Anthropic Messages request (`/v1/messages` and count_tokens).
    message_headers: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # The headers of each generation request, in order (what llmd passed on: trace context).
    headers: list[dict[str, str]] = dataclasses.field(default_factory=list)

    def app(self) -> web.Application:
        self.tail = asyncio.Event()

        async def generate(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.received.append((request.path, body))
            self.headers.append(dict(request.headers))
            self.transports.append(request.transport)
            if self.hold is not None:
                await asyncio.to_thread(self.hold.wait)
            if body.get("stream"):
                response = web.StreamResponse(headers={"content-type": "text/event-stream"})
                await response.prepare(request)
                events = b'data: {"choices": []}\n\ndata: [DONE]\n\n'
                if body.get("hold_tail"):
                    assert self.tail is not None
                    await response.write(events[:-1])
                    await self.tail.wait()
                    self.tail.clear()
                    events = events[-1:]
                await response.write(events)
                if body.get("cut_after_done") and request.transport is not None:
                    request.transport.abort()
                    return response
                await asyncio.sleep(self.linger_s)
                await response.write_eof()
                return response
            return web.json_response({"object": "fake", "choices": [], "echo": body})

        async def tokenize(request: web.Request) -> web.Response:
            body = await request.json()
            self.tokenized.append(body)
            self.tokenizing += 1
            self.tokenizing_peak = max(self.tokenizing_peak, self.tokenizing)
            try:
                if self.tokenize_hold is not None:
                    await asyncio.to_thread(self.tokenize_hold.wait)
                await asyncio.sleep(self.tokenize_delay_s)
            finally:
                self.tokenizing -= 1
            return web.json_response({"count": len(json.dumps(body)), "max_model_len": 0})

        async def pool(request: web.Request) -> web.Response:
            body = await request.json()
            self.received.append((request.path, body))
            usage = {"prompt_tokens": 3, "total_tokens": 3, "completion_tokens": 0}
            return web.json_response({"object": "list", "data": [], "usage": usage})

        async def transcribe(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            self.forms.append((request.path, request.headers["content-type"], raw))
            if b'name="stream"\r\n\r\ntrue\r\n' in raw:
                response = web.StreamResponse(headers={"content-type": "text/event-stream"})
                await response.prepare(request)
                chunk = {"object": "transcription.chunk", "choices": [{"delta": {"content": "hi"}}]}
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
            usage = {"type": "duration", "seconds": 1}
            return web.json_response({"text": "hello there", "usage": usage})

        async def messages(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.received.append((request.path, body))
            self.message_headers.append(dict(request.headers))
            if request.path.endswith("/count_tokens"):
                return web.json_response({"input_tokens": 3})
            usage = {"input_tokens": 3, "output_tokens": 1}
            message = {"type": "message", "content": [], "stop_reason": "end_turn", "usage": usage}
            if not body.get("stream"):
                return web.json_response(message)
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for name, data in (
                ("message_start", {"type": "message_start", "message": message}),
                ("message_delta", {"type": "message_delta", "usage": usage}),
                ("message_stop", {"type": "message_stop"}),
            ):
                await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            await response.write_eof()
            return response

        @web.middleware
        async def fastapi_404(request: web.Request, handler: Any) -> web.StreamResponse:
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except web.HTTPNotFound:
                return web.json_response({"detail": "Not Found"}, status=404)

        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[fastapi_404])
        app.router.add_post("/v1/chat/completions", generate)
        app.router.add_post("/v1/completions", generate)
        app.router.add_post("/v1/responses", generate)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/v1/messages", messages)
        app.router.add_post("/v1/messages/count_tokens", messages)
        app.router.add_post("/detokenize", pool)
        app.router.add_post("/v1/audio/transcriptions", transcribe)
        app.router.add_post("/v1/audio/translations", transcribe)
        for path in self.pooling_paths:
            app.router.add_post(path, pool)
        return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclasses.dataclass
class ProxyStack:
    """llmd's proxy in front of a FakeEngine; `engine_state` and `config` are live objects."""

    base_url: str
    engine: FakeEngine
    engine_state: EngineState
    ctx: DaemonState
    loop: asyncio.AbstractEventLoop

    def release_tail(self) -> None:
        """Let the fake engine send the last byte of a `hold_tail` stream."""
        assert self.engine.tail is not None
        self.loop.call_soon_threadsafe(self.engine.tail.set)

    @classmethod
    @contextlib.contextmanager
    def run(
        cls,
        model_dir: Path,
        runtime_dir: Path,
        max_model_len: int,
        real_engine: Path | None = None,
        engine: FakeEngine | None = None,
        admission: AdmissionConfig | None = None,
        engine_args: tuple[str, ...] = (),
        **validation: Any,
    ) -> Iterator[ProxyStack]:
        """Start the stack; stop it on exit. `validation` sets ValidationConfig fields,
        `admission` replaces the default AdmissionConfig, `engine` the FakeEngine,
        `engine_args` the engine table's args (`--runner pooling`: llmd takes it for a pooling
        engine).

        With `real_engine` (a running engine's Unix socket) the proxy relays to it instead of
        to the fake engine (whose `received` then stays empty), knowing its vLLM release from
        its GET /version as the supervisor does.
        """
        config = Config(
            server=ServerConfig(runtime_dir=str(runtime_dir), max_body_bytes=1024 * 1024),
            engine=EngineConfig(model=str(model_dir), served_model_name="tiny", args=engine_args),
            validation=ValidationConfig(**validation),
            admission=admission or AdmissionConfig(),
        )
        state = EngineState(phase=EnginePhase.SERVING, max_model_len=max_model_len)
        if real_engine is not None:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(real_engine))) as client:
                version = client.get("http://engine/version", timeout=30).json()["version"]
            state.api = EngineApi.parse(version)
        # No request log lines: the stack outlives each test's output capture.
        observer = Observer(log_requests="off")
        ctx = daemon_state(config, state, observer, runtime_dir)
        engine = engine or FakeEngine()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        ready = threading.Event()
        stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        errors: list[BaseException] = []

        async def main() -> None:
            runner = web.AppRunner(engine.app())
            await runner.setup()
            if real_engine is None:
                await web.UnixSite(runner, str(ctx.paths.engine_socket)).start()
            else:
                ctx.paths.engine_socket.symlink_to(real_engine)
            server = _Server(uvicorn.Config(build_app(ctx), log_config=None, access_log=False))
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started:
                await asyncio.sleep(0.01)
            loading = [t for t in asyncio.all_tasks() if t.get_name() == "tokenizer-load"]
            await asyncio.gather(*loading)
            stop.append((asyncio.get_running_loop(), asyncio.Event()))
            ready.set()
            await stop[0][1].wait()
            server.should_exit = True
            await serving
            await runner.cleanup()

        def thread_main() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:  # surfaced to the test below
                errors.append(exc)
                ready.set()

        thread = threading.Thread(target=thread_main, name="proxy-stack", daemon=True)
        thread.start()
        ready.wait(60)
        if errors:
            raise errors[0]
        loop, stopping = stop[0]
        try:
            yield cls(f"http://127.0.0.1:{port}", engine, state, ctx, loop)
        finally:
            loop.call_soon_threadsafe(stopping.set)
            thread.join(10)
