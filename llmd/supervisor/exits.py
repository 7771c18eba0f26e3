"""Classify why the engine exited, from its status, llmd's intent and its last output lines.

Pure: the supervisor feeds it the return code and the recent lines; the reason ends up in the log,
the status snapshot and the restart metrics.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Sequence

_OOM = re.compile(
    r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|Cannot allocate memory"
    r"|Available memory on node .* is less than desired",
    re.IGNORECASE,
)
_CUDA = re.compile(
    r"CUDA error|cudaError|CUDA driver|NCCL error|no CUDA-capable device", re.IGNORECASE
)
_BAD_MODEL = re.compile(
    r"does not appear to have a file|is not a local folder|Unrecognized model"
    r"|No such file or directory|not supported for now|Cannot find model"
    r"|Invalid repository ID|OSError: .*model"
    r"|Unsupported CPU attention|head_dim",
    re.IGNORECASE,
)
_ERROR_LINE = re.compile(r"Error|ERROR|Exception|Traceback|error:")


@dataclasses.dataclass(frozen=True)
class ExitReason:
    """Why the engine exited.

    `kind` is one of: stopped (llmd asked), oom, cuda_error, bad_model, killed (by a signal llmd
    did not send), exit_0_while_serving (vLLM's watchdog may exit 0 after the engine died,
    vllm#48966), engine_dead (HTTP up but /health failing; llmd stopped it), stalled (sequences
    running and no token for its stall timeout, llmd/supervisor/stall.py; llmd killed it),
    exit_code; the supervisor's own: start_timeout (not ready in time), warmup_failed (ready,
    but its warm-up request failed; llmd stopped it).
    `detail` is one human line: the signal or code, and the last error line seen.
    """

    kind: str
    detail: str


def classify_exit(
    returncode: int, *, stop_requested: bool, was_ready: bool, recent_lines: Sequence[str]
) -> ExitReason:
    """Classify one exit. `returncode` is Popen's: negative means killed by that signal number."""
    last_error = _last_error_line(recent_lines)
    status = _describe_status(returncode)
    detail = f"{status}: {last_error}" if last_error else status
    text = "\n".join(recent_lines)
    if stop_requested:
        return ExitReason("stopped", status)
    if _OOM.search(text):
        return ExitReason("oom", detail)
    if _CUDA.search(text):
        return ExitReason("cuda_error", detail)
    if not was_ready and _BAD_MODEL.search(text):
        return ExitReason("bad_model", detail)
    if returncode == -signal.SIGKILL:
        # The hint belongs to the signal: it comes before the engine's last line, not inside it.
        hinted = f"{status} (not sent by llmd; the kernel OOM killer or an operator)"
        return ExitReason("killed", f"{hinted}: {last_error}" if last_error else hinted)
    if returncode < 0:
        return ExitReason("killed", detail)
    if returncode == 0:
        return ExitReason("exit_0_while_serving" if was_ready else "exit_code", detail)
    return ExitReason("exit_code", detail)


def _describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _last_error_line(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and _ERROR_LINE.search(stripped) and not stripped.startswith("Traceback"):
            return stripped[:300]
    return ""
