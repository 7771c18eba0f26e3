"""The restart policy: backoff growth, its cap, the failure window and giving up."""

from __future__ import annotations

from llmd.config import SupervisorConfig
from llmd.supervisor.policy import ExitRecord, GiveUp, Restart, decide_restart

POLICY = SupervisorConfig(
    backoff_initial_s=1, backoff_max_s=8, max_failed_boots=3, failure_window_s=100
)


def test_first_crash_after_serving_restarts_after_initial_backoff() -> None:
    """One crash of a serving engine: restart after the initial delay."""
    assert decide_restart(POLICY, [ExitRecord(at=1000, was_ready=True)], now=1000) == Restart(1, 1)


def test_backoff_doubles_and_caps() -> None:
    """Crashes within the window double the delay up to backoff_max_s."""
    history = [ExitRecord(at=t, was_ready=True) for t in (10, 20, 30, 40, 50)]
    delays = [decide_restart(POLICY, history[: i + 1], now=history[i].at) for i in range(5)]
    assert [d.delay_s for d in delays if isinstance(d, Restart)] == [1, 2, 4, 8, 8]


def test_gives_up_after_max_failed_boots_in_window() -> None:
    """The third boot that never became ready within the window gives up."""
    history = [ExitRecord(at=t, was_ready=False) for t in (10, 20, 30)]
    assert decide_restart(POLICY, history[:2], now=20) == Restart(2, 2)
    assert decide_restart(POLICY, history, now=30) == GiveUp(failed_boots=3)


def test_old_failures_fall_out_of_the_window() -> None:
    """Failed boots older than the window neither count towards giving up nor backoff."""
    history = [
        ExitRecord(at=0, was_ready=False),
        ExitRecord(at=1, was_ready=False),
        ExitRecord(at=500, was_ready=False),
    ]
    assert decide_restart(POLICY, history, now=500) == Restart(1, 1)


def test_crashes_after_ready_never_give_up() -> None:
    """An engine that keeps serving between crashes is backed off, never given up."""
    history = [ExitRecord(at=t, was_ready=True) for t in range(0, 50, 5)]
    assert isinstance(decide_restart(POLICY, history, now=45), Restart)


def test_zero_max_failed_boots_means_never_give_up() -> None:
    """max_failed_boots = 0 disables giving up."""
    policy = SupervisorConfig(max_failed_boots=0)
    history = [ExitRecord(at=t, was_ready=False) for t in range(20)]
    assert isinstance(decide_restart(policy, history, now=19), Restart)
