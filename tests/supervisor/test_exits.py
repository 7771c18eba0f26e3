"""Exit classification from return code, intent and the engine's last lines."""

from __future__ import annotations

import signal

import pytest

from llmd.supervisor.exits import classify_exit


def kind(code: int, lines: list[str] = [], *, stop: bool = False, ready: bool = True) -> str:  # noqa: B006
    return classify_exit(code, stop_requested=stop, was_ready=ready, recent_lines=lines).kind


def test_requested_stop_is_stopped_whatever_the_code() -> None:
    """An exit llmd asked for is 'stopped', even by SIGKILL after the timeout."""
    assert kind(-signal.SIGKILL, stop=True) == "stopped"
    assert kind(0, stop=True) == "stopped"


def test_exit_zero_while_serving_is_a_failure() -> None:
    """vLLM may exit 0 after its engine died (vllm#48966): that is a failure, not a stop."""
    assert kind(0, ready=True) == "exit_0_while_serving"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], "oom"),
        (["ValueError: Available memory on node 0 (12.0 GiB) is less than desired"], "oom"),
        (["RuntimeError: CUDA error: an illegal memory access was encountered"], "cuda_error"),
        (["OSError: /models/x does not appear to have a file named config.json"], "bad_model"),
        (["ValueError: Unrecognized model in /models/x"], "bad_model"),
    ],
)
def test_recognises_causes_in_the_output(lines: list[str], expected: str) -> None:
    """OOM, CUDA and bad-model failures are recognised from the last output lines."""
    assert (
        kind(1, ["INFO starting", *lines, "Traceback (most recent call last):"], ready=False)
        == expected
    )


def test_sigkill_not_sent_by_llmd_is_killed_with_a_hint() -> None:
    """SIGKILL from outside is 'killed'; the detail gives the OOM killer hint right after the
    signal, then the engine's last error line."""
    reason = classify_exit(-signal.SIGKILL, stop_requested=False, was_ready=True, recent_lines=[])
    assert reason.kind == "killed"
    assert "SIGKILL" in reason.detail and "OOM killer" in reason.detail
    last = "(EngineCore pid=22155) ERROR RuntimeError: cancelled"
    lines = ["INFO serving", last]
    with_line = classify_exit(-signal.SIGKILL, stop_requested=False, was_ready=True,
                              recent_lines=lines)  # fmt: skip
    assert with_line.detail.endswith(f"or an operator): {last}"), with_line.detail


def test_detail_carries_the_last_error_line() -> None:
    """The detail gives the status and the last error line, for the log and `llmd status`."""
    reason = classify_exit(
        3,
        stop_requested=False,
        was_ready=True,
        recent_lines=["INFO ok", "RuntimeError: boom", "INFO bye"],
    )
    assert reason.kind == "exit_code"
    assert reason.detail == "exit status 3: RuntimeError: boom"
