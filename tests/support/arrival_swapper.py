"""A model swapper as the ones users run today (llama-swap and its vLLM forks): one model
resident, requests served in arrival order, a swap on each change of the requested model. The
baseline scripts/bench_swap.py measures llmd's swap group against.

What it copies from llama-swap (proxy/proxymanager.go, `swapProcessGroup` under the manager's
lock): a request for a model that is not resident takes the lock, waits for the resident
model's requests in flight, unloads it and loads its own; requests that came after it, for any
model, wait behind the lock, so A B A swaps twice (llmd's queue would gather both A requests
into one wake). Unload and load are vLLM's sleep mode, as llama-swap's `vllm-wrapper` does it:
`POST /sleep?level=1`, `POST /wake_up`, and ready after a one-token generation, by llmd's own
calls (llmd/supervisor/sleeping.py), so a wake costs here what it costs llmd. Where there is no
sleep mode (vLLM's CPU build) it stops the resident engine's process group and boots the next
(`Boots`), as llama-swap does with any server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import aiohttp
from aiohttp import web

from llmd.config import EngineConfig
from llmd.engine.sleep import DEV_MODE_ENV, SLEEP_MODE_FLAG
from llmd.engine.wire import Pool
from llmd.supervisor.sleeping import call_sleep, call_wake_up, first_token
from tests.support.sim_process import SimProcess
from tests.support.vllm_engine import vllm_engine


def start_engines(model: Path, names: Sequence[str], args: Sequence[str]) -> dict[str, SimProcess]:
    """One simulator per name (its served model name) on `model` with `args` and sleep mode, as
    llmd starts an on-demand engine (llmd/engine/launch.py); the first stays awake, the others
    are put to sleep at level 1 (as llmd's start-up leaves a group of one). Raises
    RuntimeError (the ones started stopped) when one does not start or sleep; else the caller
    stops them."""
    engines: dict[str, SimProcess] = {}
    try:
        for name in names:
            engines[name] = SimProcess.start(
                model, *args, SLEEP_MODE_FLAG, name=name, env={DEV_MODE_ENV: "1"}
            )
        for name, engine in engines.items():
            engine.wait_ready()
            if name != names[0]:
                with engine.client() as client:
                    if client.post("/sleep", params={"level": 1}).status_code != 200:
                        raise RuntimeError(f"{name} did not go to sleep")
    except BaseException:
        for engine in engines.values():
            engine.stop()
        raise
    return engines


class Boots(Protocol):
    """Engines that are stopped and booted instead of put to sleep (blocking calls)."""

    def boot(self, model: str) -> Path:
        """Boot `model`'s engine; its socket once healthy. Raises RuntimeError."""
        ...

    def stop(self, model: str) -> None:
        """Stop `model`'s engine (its process group)."""
        ...


class SimBoots:
    """Simulator engines on `model` with `args`, each booted anew (a fresh socket)."""

    def __init__(self, model: Path, args: Sequence[str]) -> None:
        self.model, self.args = model, list(args)
        self.running: dict[str, SimProcess] = {}

    def boot(self, model: str) -> Path:
        engine = SimProcess.start(self.model, *self.args, name=model)
        self.running[model] = engine
        engine.wait_ready()
        return engine.socket

    def stop(self, model: str) -> None:
        engine = self.running.pop(model, None)
        if engine is not None:
            engine.stop()


class VllmBoots:
    """vLLM engines (tests/support/vllm_engine.py, vLLM's CPU build) on `model` with `args`,
    each serving its model's name on a socket of its own under `workdir`."""

    def __init__(self, model: Path, args: Sequence[str], workdir: Path) -> None:
        self.model, self.args, self.workdir = model, tuple(args), workdir
        self.running: dict[str, contextlib.ExitStack] = {}

    def boot(self, model: str) -> Path:
        stack = contextlib.ExitStack()
        args = (*self.args, "--served-model-name", model)
        socket = self.workdir / f"{model}.sock"
        stack.enter_context(vllm_engine(self.model, socket=socket, args=args))
        self.running[model] = stack
        return socket

    def stop(self, model: str) -> None:
        stack = self.running.pop(model, None)
        if stack is not None:
            stack.close()


class ArrivalSwapper:
    """An OpenAI-compatible proxy on 127.0.0.1 over `engines` (served model name -> the Unix
    socket of an engine started with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1), of which
    `resident` is awake and the others asleep at level 1; or, with `boots`, `resident` booted
    and the others stopped (their sockets unused). `swaps` counts its wakes (or boots)."""

    def __init__(
        self,
        engines: Mapping[str, Path],
        resident: str,
        boots: Boots | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.engines = {
            name: EngineConfig(kind="sim", served_model_name=name, start_timeout_s=start_timeout_s)
            for name in engines
        }
        self.sockets = dict(engines)
        self.boots = boots
        self.resident = resident
        self.swaps = 0
        self._lock = asyncio.Lock()  # FIFO: its waiters are woken in the order they came
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._clients: dict[str, aiohttp.ClientSession] = {}  # the relay's
        self._probes: dict[str, Pool] = {}  # the sleep, wake and first-token calls

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Serve on a free port; yields its base URL (`http://127.0.0.1:PORT`)."""
        self._clients = {name: _session(path) for name, path in self.sockets.items()}
        self._probes = {name: Pool(socket_path=path) for name, path in self.sockets.items()}
        app = web.Application()
        app.router.add_post("/v1/{tail:.*}", self._relay)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()
            for client in self._clients.values():
                await client.close()
            for probe in self._probes.values():
                probe.close()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        """Forward the request to its model's engine once that model is resident, streaming the
        answer back as it comes."""
        body = await request.read()
        try:
            model = json.loads(body).get("model")
        except ValueError:
            model = None
        if model not in self.engines:
            return web.json_response({"error": {"message": f"no model {model!r}"}}, status=404)
        async with self._lock:
            if model != self.resident:
                await self._swap(model)
            self._in_flight += 1
            self._drained.clear()
        try:
            return await self._forward(request, model, body)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._drained.set()

    async def _swap(self, model: str) -> None:
        """Wait for the resident model's requests, put it to sleep, wake `model` (ready after a
        one-token generation). Raises RuntimeError when a call fails."""
        await self._drained.wait()
        old = self.resident
        probe, engine = self._probes[model], self.engines[model]
        if self.boots is not None:
            await asyncio.to_thread(self.boots.stop, old)
            socket = await asyncio.to_thread(self.boots.boot, model)
            if socket != self.sockets[model]:
                await self._clients[model].close()
                probe.close()
                self.sockets[model], probe = socket, Pool(socket_path=socket)
                self._clients[model], self._probes[model] = _session(socket), probe
            woken = True
        elif not await call_sleep(self._probes[old], self.engines[old], 1):
            raise RuntimeError(f"{old} did not go to sleep")
        else:
            woken = await call_wake_up(probe, engine)
        if not (woken and await first_token(probe, engine, engine.start_timeout_s)):
            raise RuntimeError(f"{model} did not wake")
        self.resident = model
        self.swaps += 1

    async def _forward(self, request: web.Request, model: str, body: bytes) -> web.StreamResponse:
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        async with self._clients[model].post(
            f"http://engine{request.path}", data=body, headers=headers
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


def _session(socket: Path) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=str(socket)),
        timeout=aiohttp.ClientTimeout(total=None),
    )
