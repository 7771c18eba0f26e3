"""`llmd serve` as systemd runs it, on the simulator: the sd_notify sequence through start,
reload and stop, and the drain on SIGTERM with streams in flight."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmd.supervisor.group import group_members
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


class NotifyListener:
    """A real AF_UNIX datagram socket standing in for systemd's $NOTIFY_SOCKET."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[dict[str, str]] = []

    def wait_for(self, key: str, timeout_s: float) -> dict[str, str]:
        """Collect messages until one carries `key`; that message."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536).decode()
            except TimeoutError:
                break
            message = dict(line.split("=", 1) for line in data.splitlines())
            self.messages.append(message)
            if key in message:
                return message
        raise AssertionError(f"no {key} within {timeout_s}s; got {self.messages}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[NotifyListener]:
    notify = NotifyListener(short_tmpdir("llmd-notify-") / "notify.sock")
    yield notify
    notify.close()


def test_notify_sequence_through_start_reload_and_stop(listener: NotifyListener) -> None:
    """READY=1 only once the engine serves; STATUS lines; WATCHDOG pings; RELOADING then READY
    on SIGHUP; STOPPING on SIGTERM; exit 0."""
    args = ("--fault-boot-delay", "1.5")  # a visible loading phase before READY
    env = {"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "1000000"}
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), args), env=env)
    try:
        ready = listener.wait_for("READY", timeout_s=60)
        assert httpx.get(llmd.base_url + "/ready").status_code == 200
        assert ready["STATUS"].startswith("serving tiny")
        before_ready = listener.messages[:-1]
        assert any("EXTEND_TIMEOUT_USEC" in m for m in before_ready)
        assert any(m.get("STATUS", "").startswith("loading model") for m in before_ready)
        listener.wait_for("WATCHDOG", timeout_s=15)
        listener.wait_for("WATCHDOG", timeout_s=15)

        llmd.process.send_signal(signal.SIGHUP)
        reloading = listener.wait_for("RELOADING", timeout_s=10)
        assert int(reloading["MONOTONIC_USEC"]) > 0
        assert listener.wait_for("READY", timeout_s=10)["READY"] == "1"

        llmd.process.send_signal(signal.SIGTERM)
        stopping = listener.wait_for("STOPPING", timeout_s=10)
        assert stopping["STATUS"].startswith("draining")
        assert llmd.process.wait(timeout=30) == 0
    finally:
        llmd.stop()


STREAM = {
    "model": "tiny",
    "prompt": "Tell me",
    "max_tokens": 300,
    "ignore_eos": True,
    "stream": True,
}


async def read_stream(
    client: httpx.AsyncClient, url: str, started: asyncio.Event, count: list[int]
) -> list[str]:
    """One streamed completion; its non-empty SSE lines. Sets `started` once all 20 streams
    have their first event."""
    async with client.stream("POST", url, json=STREAM) as response:
        assert response.status_code == 200
        lines = []
        async for line in response.aiter_lines():
            if line:
                lines.append(line)
                count[0] += len(lines) == 1
                if count[0] == 20:
                    started.set()
        return lines


async def drain_with_streams(llmd: LlmdProcess) -> tuple[list[list[str]], httpx.Response]:
    """20 streams in flight, then SIGTERM; the streams' lines and a request made while draining."""
    started, count = asyncio.Event(), [0]
    async with httpx.AsyncClient(timeout=60) as client:
        url = llmd.base_url + "/v1/completions"
        streams = [asyncio.create_task(read_stream(client, url, started, count)) for _ in range(20)]
        await asyncio.wait_for(started.wait(), timeout=30)
        llmd.process.send_signal(signal.SIGTERM)
        for _ in range(500):  # until llmd has taken the signal: /ready answers 503
            if (await client.get(llmd.base_url + "/ready")).status_code == 503:
                break
            await asyncio.sleep(0.01)
        refused = await client.post(url, json={**STREAM, "stream": False})
        return await asyncio.gather(*streams), refused


def test_sigterm_drains_twenty_streams_then_stops(tmp_path: Path) -> None:
    """SIGTERM with 20 streams in flight: all 20 finish, new requests get 503 draining with
    Retry-After, the engine group is gone, exit 0."""
    slow = ("--step-base-ms", "5")  # 300 tokens take 1.5 s: all 20 are in flight at SIGTERM
    config = sim_config(ensure_tiny_model(), slow, server={"drain_timeout_s": 30.0})
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=30)
        pgid = llmd.admin_status()["engine"]["pid"]
        results, refused = asyncio.run(drain_with_streams(llmd))
        assert llmd.process.wait(timeout=30) == 0
    finally:
        llmd.stop()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert int(refused.headers["retry-after"]) >= 1
    for lines in results:
        assert lines[-1] == "data: [DONE]"
        usage_or_last = json.loads(lines[-2].removeprefix("data: "))
        assert (
            "error" not in usage_or_last
            and usage_or_last["choices"][0]["finish_reason"] == "length"
        )
    assert not group_members(pgid)


def test_drain_deadline_ends_streams_in_band() -> None:
    """Streams that outlive the drain deadline end with an in-band error, then [DONE]; exit 0."""
    slow = ("--step-base-ms", "20")  # 300 tokens take 6 s, well past the 1 s deadline
    config = sim_config(ensure_tiny_model(), slow, server={"drain_timeout_s": 1.0})
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=30)
        results, _ = asyncio.run(drain_with_streams(llmd))
        assert llmd.process.wait(timeout=30) == 0
    finally:
        llmd.stop()
    for lines in results:
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2].removeprefix("data: "))["error"]["code"] == "draining"
