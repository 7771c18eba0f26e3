"""The validator's tokenizer load runs on a daemon thread of its own: a stop never waits for it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from llmd.validation.validator import _on_daemon_thread


async def test_the_call_runs_on_a_daemon_thread_and_its_outcome_comes_back() -> None:
    """The result comes back to the awaiting task; so does an exception."""
    threads: list[threading.Thread] = []

    def shout(text: str) -> str:
        threads.append(threading.current_thread())
        return text.upper()

    assert await _on_daemon_thread(shout, "tiny") == "TINY"
    assert threads[0].daemon and threads[0] is not threading.main_thread()
    with pytest.raises(ValueError):
        await _on_daemon_thread(int, "not a number")


async def test_a_cancelled_wait_lets_the_thread_finish_alone() -> None:
    """The awaiting task is cancelled (llmd stops) while the call runs: the call's end later
    changes nothing and raises nowhere."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    release = threading.Event()
    waiting = asyncio.create_task(_on_daemon_thread(lambda _: release.wait(30), "x"))
    await asyncio.sleep(0)
    (thread,) = [t for t in threading.enumerate() if t.name == "tokenizer-load"]
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await asyncio.to_thread(thread.join, 30)
    for _ in range(3):  # let the thread's hand-over to the loop run
        await asyncio.sleep(0)
    assert not thread.is_alive() and errors == []
