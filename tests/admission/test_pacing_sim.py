"""Batch pacing through a real `llmd serve` over the simulator: `admission.batch_pace_ms` holds
batch past its burst in llmd's queue, an interactive request sent behind it is not held, and
the held batch request goes once its interval has passed."""

from __future__ import annotations

import concurrent.futures

import httpx

from tests.support.configs import shipped_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

PACE_MS = 3000.0  # long beside the simulator's answers, so the order is not a race


def complete(llmd: LlmdProcess, priority: str) -> httpx.Response:
    """A non-streamed two-token completion of class `priority`."""
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 2}
    headers = {"x-llmd-priority": priority}
    return httpx.post(llmd.base_url + "/v1/completions", json=body, headers=headers, timeout=60)


def test_batch_past_its_burst_waits_its_interval_and_interactive_passes() -> None:
    """Three batch completions at once: two go to the engine (the burst), the third waits in
    llmd's batch queue; an interactive one sent then is answered while it still waits, itself
    never queued; the third is answered after about one more interval."""
    config = shipped_config("sim.toml", ensure_tiny_model(), admission={"batch_pace_ms": PACE_MS})
    with (
        LlmdProcess.running(config, "llmd-pace-") as llmd,
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        batch = [pool.submit(complete, llmd, "batch") for _ in range(3)]
        assert wait_for(lambda: llmd.queue_depth("batch") == 1, timeout_s=10)
        chat = complete(llmd, "interactive")
        assert chat.status_code == 200, chat.text
        assert float(chat.headers["x-llmd-queue-ms"]) < PACE_MS / 3
        assert llmd.queue_depth("batch") == 1
        answers = [future.result() for future in batch]
    assert all(answer.status_code == 200 for answer in answers)
    waits = sorted(float(answer.headers["x-llmd-queue-ms"]) for answer in answers)
    assert waits[-1] >= PACE_MS * 0.9
