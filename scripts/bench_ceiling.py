"""The relay's ceiling: how many streamed tokens and requests a second one core of llmd relays
before llmd's own process is what limits them (issue 37).

`llmd serve` with etc/sim.toml and the simulator's `--zero-latency` (it answers as fast as it
can), llmd pinned to one core (`--llmd-cpu`, sched_setaffinity on each of its threads, as
`taskset -p` does) and its simulator child, with this script's clients, on the others. Three
paths to the same simulator socket, in an order rotated by round:
  splice  client → TCP → a bare uvloop byte splice (its own process, pinned like llmd) →
          the simulator's socket: the floor for any relay process
  stack   client → TCP → uvicorn and aiohttp as llmd runs them, a bare ASGI app between
          (its own process, pinned like llmd) → the simulator's socket: the floor of llmd's
          HTTP libraries
  llmd    client → TCP → llmd → the simulator's socket
For each path, streamed completions (`--tokens` each, ignore_eos) from closed-loop clients at
rising concurrency (`--streams`), then non-streamed ones (16 tokens) at `--clients`; per step
the tokens/s and requests/s the clients got, the relay process's CPU time (user + system, its
children excluded, from /proc through psutil) per streamed token and per request, and its CPU
use in cores (1.0: its core is saturated). A path's ceiling is its best step. Per round it
prints the figures; at the end the median (min-max) over rounds, and the ratios llmd/splice,
llmd/stack and stack/splice (CPU per token also at the same concurrency).

CPU per token and per request are the stable figures on a shared machine; tokens/s and
requests/s move with whatever else runs on the clients' and the simulator's core (and at the
ceiling the simulator itself may be what limits both paths: see each step's CPU use).

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_ceiling.py --rounds 3 \
        [--output docs/bench/ceiling-DATE.json] [--py-spy .venv/bin/py-spy]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Protocol

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.engine.client import KEEPALIVE_S  # noqa: E402
from tests.support.configs import config_sections  # noqa: E402
from tests.support.llmd_process import LlmdProcess, free_port, stop_process  # noqa: E402
from tests.support.machine_load import load_average  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.profiling import py_spy_record, report_profile  # noqa: E402
from tests.support.rounds import (  # noqa: E402
    cpu_seconds,
    rotated,
    round_record,
    spread,
    write_record,
)
from tests.support.sim_process import sim_config  # noqa: E402
from tests.support.splice import splice_server  # noqa: E402

PATHS = ("splice", "stack", "llmd")
# How long a relay helper may take to listen: its interpreter's start and imports, seconds
# under a loaded host (about 0.3 s idle).
HELPER_START_S = 60.0


class HelperProcess(Protocol):
    """What `wait_listening` asks of a helper (a `subprocess.Popen`)."""

    def poll(self) -> int | None: ...


# -- the splice: a process of its own, so that its CPU time is its own ------------------------


def splice_main(port: int, upstream: str) -> None:
    """Serve a bare byte splice on 127.0.0.1:`port` to the Unix socket `upstream` (uvloop)."""
    import uvloop

    uvloop.run(splice_server(port, upstream, backlog=4096))


# -- the firehose: the simulator's answers replayed at wire speed ----------------------------


class Firehose(asyncio.Protocol):
    """The engine side of one connection. A POST answered before (the same body) is answered
    again from the recording, one HTTP chunk (one event, vLLM's layout) a write, each stream
    one chunk a turn of the loop, as an engine's steps give each sequence one token; anything
    else (and a POST's first time) goes to the simulator on `Firehose.upstream` and its
    answer is recorded."""

    upstream = ""
    recorded: ClassVar[
        dict[bytes, list[bytes]]
    ] = {}  # request (head's first line and body) -> writes
    active: ClassVar[
        list[tuple[asyncio.Transport, list[bytes], list[int]]]
    ] = []  # streams replaying
    stepping = False

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.forwarding: set[asyncio.Future[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end]
        marker = head.lower().find(b"content-length:")
        length = int(head[marker + 15 :].split(b"\r\n", 1)[0]) if marker >= 0 else 0
        if len(self.buffer) < end + 4 + length:
            return
        raw, self.buffer = self.buffer[: end + 4 + length], self.buffer[end + 4 + length :]
        key = head.split(b"\r\n", 1)[0] + raw[end + 4 :]
        writes = self.recorded.get(key) if head.startswith(b"POST") else None
        if writes is None:
            task = asyncio.ensure_future(self.forward(raw, key, head.startswith(b"POST")))
            self.forwarding.add(task)
            task.add_done_callback(self.forwarding.discard)
        else:
            self.replay(writes)

    def replay(self, writes: list[bytes]) -> None:
        assert self.transport is not None
        Firehose.active.append((self.transport, writes, [0]))
        if not Firehose.stepping:
            Firehose.stepping = True
            asyncio.get_running_loop().call_soon(Firehose.step)

    @staticmethod
    def step() -> None:
        """One write to each stream replaying; again next turn while any is left."""
        still = []
        for transport, writes, at in Firehose.active:
            if transport.is_closing():
                continue
            transport.write(writes[at[0]])
            at[0] += 1
            if at[0] < len(writes):
                still.append((transport, writes, at))
        Firehose.active = still
        if still:
            asyncio.get_running_loop().call_soon(Firehose.step)
        else:
            Firehose.stepping = False

    async def forward(self, raw: bytes, key: bytes, record: bool) -> None:
        loop = asyncio.get_running_loop()
        transport, exchange = await loop.create_unix_connection(Exchange, self.upstream)
        try:
            status, body = await exchange.ask(raw)
        finally:
            transport.close()
        assert exchange.head is not None and self.transport is not None
        head = exchange.head_raw + b"\r\n\r\n"
        writes = [head, *_chunks(body)] if exchange.length < 0 else [head + body]
        if record and status == 200:
            Firehose.recorded[key] = writes
        self.transport.write(b"".join(writes))


def _chunks(body: bytes) -> list[bytes]:
    """A chunked body split at its chunks, each with its framing."""
    out, at = [], 0
    while at < len(body):
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        end = line_end + 2 + size + 2
        out.append(body[at:end])
        at = end
    return out


def firehose_main(path: str, upstream: str) -> None:
    """Serve the firehose on the Unix socket `path`, in front of the simulator's `upstream`."""
    import uvloop

    Firehose.upstream = upstream

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_unix_server(Firehose, path, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


# -- the stack: uvicorn and aiohttp as llmd runs them, with nothing of llmd between --------


def stack_main(port: int, upstream: str) -> None:
    """Serve on 127.0.0.1:`port` a pure ASGI app under uvicorn (httptools, uvloop, as llmd
    serves) that POSTs each request's body to the Unix socket `upstream` through one kept-alive
    aiohttp session and relays the answer chunk by chunk (`readany`): the floor of llmd's
    HTTP stack, with none of llmd's work."""
    import aiohttp
    import uvicorn

    session: aiohttp.ClientSession | None = None

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] != "http":
            return
        if session is None:
            connector = aiohttp.UnixConnector(path=upstream, limit=0, keepalive_timeout=2.0)
            session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {"content-type": "application/json"}
        async with session.post("http://engine" + scope["path"], data=body, headers=headers) as r:
            kind = r.headers.get("content-type", "application/json").encode()
            if r.headers.get("transfer-encoding") != "chunked":
                payload = await r.read()
                await send(
                    {
                        "type": "http.response.start",
                        "status": r.status,
                        "headers": [
                            (b"content-type", kind),
                            (b"content-length", str(len(payload)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
                return
            start = {"type": "http.response.start", "status": r.status, "headers": [
                (b"content-type", kind)]}  # fmt: skip
            await send(start)
            while chunk := await r.content.readany():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", ws="none",
        lifespan="off", log_config=None, access_log=False,
    )  # fmt: skip


# -- the clients: raw HTTP/1.1 on kept-alive connections, as cheap as a client gets -----------


class Exchange(asyncio.Protocol):
    """One kept-alive connection; `ask(request)` sends a request and waits for its whole
    answer (Content-Length or chunked): (status, body bytes as received, chunked framing
    included)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parts: list[bytes] = []
        self.tail = b""
        self.head: bytes | None = None
        self.head_raw = b""
        self.length = -1
        self.got = 0
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("the relay closed the connection"))

    def data_received(self, data: bytes) -> None:
        self.parts.append(data)
        if self.head is None:
            raw = b"".join(self.parts)
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head_raw = raw[:end]
            self.head = self.head_raw.lower()
            rest = raw[end + 4 :]
            self.parts = [rest]
            self.got = len(rest)
            marker = self.head.find(b"content-length:")
            if marker >= 0:
                self.length = int(self.head[marker + 15 :].split(b"\r\n", 1)[0])
            self.tail = rest[-8:]
        else:
            self.got += len(data)
            self.tail = (self.tail + data)[-8:]
        if (self.length >= 0 and self.got >= self.length) or (
            self.length < 0 and self.tail.endswith(b"0\r\n\r\n")
        ):
            assert self.done is not None
            self.done.set_result(None)

    async def ask(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self.parts, self.tail, self.head, self.length, self.got = [], b"", None, -1, 0
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        await self.done
        assert self.head is not None
        return int(self.head.split(b" ", 2)[1]), b"".join(self.parts)


def request_bytes(port: int, *, stream: bool, tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "tiny",
            "prompt": "The quick brown fox",
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": stream,
        }
    ).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    ) % (port, len(body), body)


async def closed_loop(
    port: int, request: bytes, clients: int, seconds: float
) -> tuple[int, int, int, bytes]:
    """`clients` connections each sending `request` back to back for `seconds`: (answers
    done, failures, events in the answers that were checked, one answer's body)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + seconds
    done = failures = 0
    sample = b""

    async def client() -> None:
        nonlocal done, failures, sample
        exchange: Exchange | None = None
        while time.monotonic() < deadline:
            if exchange is None:
                _, exchange = await loop.create_connection(Exchange, "127.0.0.1", port)
            try:
                status, body = await exchange.ask(request)
            except ConnectionError:  # the relay closed it: a failure, and a new connection
                failures += 1
                exchange = None
                continue
            if status != 200:
                failures += 1
                sample = body
                continue
            done += 1
            if not sample:
                sample = body
        if exchange is not None and exchange.transport is not None:
            exchange.transport.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return done, failures, sample.count(b"data: "), sample


async def step(
    port: int, pid: int, *, stream: bool, tokens: int, clients: int, seconds: float
) -> dict[str, Any]:
    """One load step against the relay on `port` (process `pid`): its figures."""
    request = request_bytes(port, stream=stream, tokens=tokens)
    await closed_loop(port, request, clients, 0.5)  # connections and both processes warm
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    done, failures, events, sample = await closed_loop(port, request, clients, seconds)
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - t0
    streamed = done * tokens if stream else 0
    return {
        "clients": clients,
        "stream": stream,
        "requests": done,
        "failures": failures,
        "events_per_answer": events if stream else None,
        "failure_sample": sample[:300].decode(errors="replace") if failures else None,
        "tokens_per_s": streamed / wall if stream else None,
        "requests_per_s": done / wall,
        "relay_cores": cpu / wall,
        "cpu_us_per_token": cpu / streamed * 1e6 if streamed else None,
        "cpu_us_per_request": cpu / done * 1e6 if done else None,
    }


async def sweep(port: int, pid: int, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The streamed steps at each of `args.streams`, then the non-streamed step."""
    streamed = [
        await step(port, pid, stream=True, tokens=args.tokens, clients=c, seconds=args.seconds)
        for c in args.streams
    ]
    whole = [
        await step(port, pid, stream=False, tokens=16, clients=c, seconds=args.seconds)
        for c in args.clients
    ]
    return {"streamed": streamed, "whole": whole}


def ceiling(steps: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The step with the most `key` a second."""
    return max(steps, key=lambda s: s[key] or 0.0)


# -- processes and cores ----------------------------------------------------------------------


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` on `cpus` (threads it starts later inherit their creator's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


def children(pid: int) -> list[int]:
    import psutil

    return [child.pid for child in psutil.Process(pid).children(recursive=True)]


def start_firehose(engine_socket: Path, cpus: set[int]) -> subprocess.Popen[bytes]:
    """Put the firehose at `engine_socket`, the simulator moved behind it (its listening
    socket renamed: new connections to the old path reach the firehose)."""
    moved = engine_socket.with_name("engine-sim.sock")
    os.rename(engine_socket, moved)
    process = subprocess.Popen(
        [sys.executable, __file__, "--firehose-serve", str(engine_socket), str(moved)]
    )
    pin(process.pid, cpus)
    deadline = time.monotonic() + 10
    while not engine_socket.exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the firehose did not start")
        time.sleep(0.05)
    return process


def wait_listening(port: int, helper: HelperProcess, timeout_s: float) -> None:
    """Return once 127.0.0.1:`port` takes a connection (the relay `helper` runs has bound and
    listens); raise RuntimeError when `helper` exits first, or after `timeout_s` seconds.
    A fixed wait (2.5 s until 2026-12-07) was too short under load 6-11: Connection refused
    in 4 runs of 20."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if helper.poll() is not None:
            raise RuntimeError(f"the relay for port {port} exited ({helper.poll()})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on port {port} after {timeout_s:g} s")
        time.sleep(0.02)


def ratios(path: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """`path`'s ceilings over `base`'s: tokens/s, CPU per token (each at its own ceiling, and
    at the same concurrency as `base`'s ceiling), requests/s, CPU per request."""
    same = next(s for s in path["streamed"] if s["clients"] == base["streamed_ceiling"]["clients"])
    mine, theirs = path["streamed_ceiling"], base["streamed_ceiling"]
    whole, whole_base = path["whole_ceiling"], base["whole_ceiling"]
    return {
        "tokens_per_s": mine["tokens_per_s"] / theirs["tokens_per_s"],
        "cpu_per_token": mine["cpu_us_per_token"] / theirs["cpu_us_per_token"],
        "cpu_per_token_same_load": same["cpu_us_per_token"] / theirs["cpu_us_per_token"],
        "requests_per_s": whole["requests_per_s"] / whole_base["requests_per_s"],
        "cpu_per_request": whole["cpu_us_per_request"] / whole_base["cpu_us_per_request"],
    }


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per path: medians (and min-max strings) of its ceilings over rounds; the ratios; the
    tokens/s one core would relay at each path's CPU per token."""
    out: dict[str, Any] = {}
    for path in PATHS:
        rows = [r[path] for r in records]
        out[path] = {
            "streamed_tokens_per_s": spread([r["streamed_ceiling"]["tokens_per_s"] for r in rows]),
            "streamed_requests_per_s": spread(
                [r["streamed_ceiling"]["requests_per_s"] for r in rows]
            ),
            "streamed_cores": spread([r["streamed_ceiling"]["relay_cores"] for r in rows], 2),
            "cpu_us_per_token": spread(
                [r["streamed_ceiling"]["cpu_us_per_token"] for r in rows], 2
            ),
            "cpu_us_per_streamed_request": spread(
                [r["streamed_ceiling"]["cpu_us_per_request"] for r in rows]
            ),
            "whole_requests_per_s": spread([r["whole_ceiling"]["requests_per_s"] for r in rows]),
            "whole_cores": spread([r["whole_ceiling"]["relay_cores"] for r in rows], 2),
            "cpu_us_per_request": spread([r["whole_ceiling"]["cpu_us_per_request"] for r in rows]),
        }
    for name in ("llmd_over_splice", "llmd_over_stack", "stack_over_splice"):
        keys = records[0][name] if records else {}
        out[name] = {key: spread([r[name][key] for r in records], 2) for key in keys}
    out["one_core_tokens_per_s_from_cpu"] = {
        path: spread([1e6 / r[path]["streamed_ceiling"]["cpu_us_per_token"] for r in records])
        for path in PATHS
    }
    return out


async def measure(
    targets: dict[str, tuple[int, int]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """`args.rounds` rounds of each path's sweep (`targets`: path -> (port, relay's pid)), the
    paths' order rotated by one a round; one record per round, with llmd's ratios to the
    splice and to the stack."""
    records = []
    for round_no in range(1, args.rounds + 1):
        order = rotated(PATHS, round_no)
        record = round_record(round_no, load_before=load_average())
        for path in order:
            port, pid = targets[path]
            steps = await sweep(port, pid, args)
            record[path] = {
                **steps,
                "streamed_ceiling": ceiling(steps["streamed"], "tokens_per_s"),
                "whole_ceiling": ceiling(steps["whole"], "requests_per_s"),
            }
        for base in ("splice", "stack"):
            record[f"llmd_over_{base}"] = ratios(record["llmd"], record[base])
        record["stack_over_splice"] = ratios(record["stack"], record["splice"])
        print(json.dumps(record), flush=True)
        records.append(record)
    if args.py_spy:
        port, pid = targets["llmd"]
        with py_spy_record(args.py_spy, pid, args.profile, rate=args.py_spy_rate):
            await step(
                port, pid, stream=True, tokens=args.tokens, clients=max(args.streams),
                seconds=args.seconds,
            )  # fmt: skip
        with py_spy_record(args.py_spy, pid, whole_profile(args.profile), rate=args.py_spy_rate):
            await step(
                port, pid, stream=False, tokens=16, clients=max(args.clients), seconds=args.seconds
            )
    return records


def whole_profile(streamed: Path) -> Path:
    """Where the profile of the non-streamed step goes, beside the streamed one's."""
    return streamed.with_name(streamed.stem + "-whole" + streamed.suffix)


def main() -> None:
    if sys.argv[1:2] == ["--firehose-serve"]:
        firehose_main(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1:2] == ["--splice-serve"]:
        splice_main(int(sys.argv[2]), sys.argv[3])
        return
    if sys.argv[1:2] == ["--stack-serve"]:
        stack_main(int(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per step")
    parser.add_argument("--tokens", type=int, default=200, help="per streamed answer")
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256]
    )
    parser.add_argument(
        "--clients", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64]
    )
    parser.add_argument(
        "--engine",
        choices=("firehose", "sim"),
        default="firehose",
        help="firehose: the simulator's answers replayed at wire speed (default); sim: the "
        "zero-latency simulator itself (its own CPU limits both paths near 40,000 tokens/s)",
    )
    parser.add_argument("--llmd-cpu", type=int, default=0, help="the core llmd and the splice get")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--py-spy", help="py-spy's path: profile llmd in an extra step")
    parser.add_argument("--profile", type=Path, default=Path("/tmp/llmd-ceiling.collapsed"))
    parser.add_argument("--py-spy-rate", type=int, default=100, help="samples a second")
    args = parser.parse_args()
    relay_cpus = {args.llmd_cpu}
    other_cpus = (os.sched_getaffinity(0) - relay_cpus) or relay_cpus
    config = sim_config(
        ensure_tiny_model(),
        ["--zero-latency", "--max-num-seqs", "1024"],
        **config_sections(args.set),
    )
    with LlmdProcess.running(config, "llmd-ceiling-") as llmd:
        llmd.wait_tokenizer()
        pin(llmd.process.pid, relay_cpus)
        for child in children(llmd.process.pid):
            pin(child, other_cpus)
        os.sched_setaffinity(0, other_cpus)
        helpers: list[subprocess.Popen[bytes]] = []
        try:
            moved_at = time.monotonic()
            if args.engine == "firehose":
                helpers.append(start_firehose(llmd.engine_socket, other_cpus))
                moved_at = time.monotonic()
            targets = {"llmd": (llmd.port, llmd.process.pid)}
            for path in ("splice", "stack"):
                port = free_port()
                helper = subprocess.Popen(
                    [sys.executable, __file__, f"--{path}-serve", str(port),
                     str(llmd.engine_socket)]
                )  # fmt: skip
                helpers.append(helper)
                pin(helper.pid, relay_cpus)
                targets[path] = (port, helper.pid)
            import uvloop

            for path in ("splice", "stack"):
                port, pid = targets[path]
                wait_listening(port, next(h for h in helpers if h.pid == pid), HELPER_START_S)
            # llmd's engine connections kept alive from before the firehose moved the
            # simulator's socket go on to the simulator until they idle out: wait them out.
            time.sleep(max(0.0, moved_at + KEEPALIVE_S + 0.1 - time.monotonic()))
            records = uvloop.run(measure(targets, args))
        finally:
            for helper in helpers:
                stop_process(helper, 5)
    summary = summarise(records)
    print("\nmedian (min-max) over rounds:")
    print(json.dumps(summary, indent=2))
    shares = {
        "streamed": report_profile(args.py_spy, args.profile, "py-spy, llmd, streamed step"),
        "whole": report_profile(
            args.py_spy, whole_profile(args.profile), "py-spy, llmd, non-streamed step"
        ),
    }
    write_record(
        args.output,
        settings=args.set,
        cpus={"relay": sorted(relay_cpus), "others": sorted(other_cpus)},
        summary=summary,
        rounds=records,
        profile=shares,
    )


if __name__ == "__main__":
    main()
