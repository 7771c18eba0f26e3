"""Scenario I's hang-up: partway through a step, a share of the users hang up their streams
all at once; how fast the engine then stops their sequences, and what the users who stay
see before and after.

The engine's stop is read from its `num_requests_running` gauge (the bench's metrics source:
the engine straight, `--direct` or `--metrics-url`; through llmd alone, llmd's copy of it,
refreshed every `telemetry.engine_interval_s`), polled every 20 ms from the hang-up until it
is down to the users who stay (each has one request at most in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Sequence

from llmd.bench.client import RequestResult
from llmd.bench.percentiles import ms_percentiles
from llmd.bench.sampler import GaugeSampler
from llmd.bench.scenarios import Hangup

# The longest the bench waits for the engine to stop the sequences of those who left.
STOP_WAIT_S = 10.0
STOP_POLL_S = 0.02


class HangupWave:
    """One step's hang-up: which users leave, the event they wait on, and what it measured
    (times in seconds on the results' clock)."""

    def __init__(self, hangup: Hangup, concurrency: int) -> None:
        self.hangup = hangup
        self.leavers = hangup.leavers(concurrency)
        self.stayers = concurrency - self.leavers
        self.fired = asyncio.Event()
        self.at_s: float | None = None
        self.running_before: float | None = None
        self.engine_stop_s: float | None = None

    def leaves(self, user: int) -> bool:
        """Whether `user` (0-based) is one of those who hang up."""
        return user < self.leavers

    async def send(self, request: Awaitable[RequestResult], result: RequestResult) -> bool:
        """Run `request` until it ends or the wave fires; True when it was cut: the stream
        hung up (its connection closed, so the server must abort the sequence), `result`
        then `disconnected` with the chunks read so far."""
        sending = asyncio.ensure_future(request)
        waiting = asyncio.ensure_future(self.fired.wait())
        done, _ = await asyncio.wait({sending, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if sending in done:
            waiting.cancel()
            return False
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        result.outcome, result.error_kind = "disconnected", None
        result.output_tokens = result.chunks
        return True

    async def fire(self, start_at: float, clock_zero: float, sampler: GaugeSampler | None) -> None:
        """At `start_at` (perf_counter s) make the leavers hang up, then time the engine's
        running gauge down to the stayers (when there is a sampler to read it)."""
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        if sampler is not None:
            self.running_before = await sampler.running()
        self.fired.set()
        fired_at = time.perf_counter()
        self.at_s = fired_at - clock_zero
        if sampler is None or self.running_before is None:
            return
        deadline = fired_at + STOP_WAIT_S
        while time.perf_counter() < deadline:
            running = await sampler.running()
            if running is not None and running <= self.stayers:
                self.engine_stop_s = time.perf_counter() - fired_at
                return
            await asyncio.sleep(STOP_POLL_S)


@dataclasses.dataclass(frozen=True)
class HangupSummary:
    """A step of I: at `at_s` `leavers` of the users hung up (`cut`: the requests cut
    mid-stream); the engine ran `running_before` sequences and took `engine_stop_s` to be down
    to the stayers' (None: not within 10 s, or no gauge to read); the stayers' TTFT and mean
    inter-token time per request (ms) before and after, and their failures."""

    at_s: float | None
    leavers: int
    stayers: int
    cut: int
    running_before: float | None
    engine_stop_s: float | None
    stayers_ttft_before_ms: dict[str, float | None]
    stayers_ttft_after_ms: dict[str, float | None]
    stayers_itl_before_ms: dict[str, float | None]
    stayers_itl_after_ms: dict[str, float | None]
    stayers_errors: int


def hangup_summary(wave: HangupWave, results: Sequence[RequestResult]) -> HangupSummary:
    """The figures of `wave` over the step's `results`."""
    at = wave.at_s if wave.at_s is not None else float("inf")
    stayed = [r for r in results if not wave.leaves(r.user)]
    ok = [r for r in stayed if r.outcome == "ok" and r.ttft is not None]

    def itl(r: RequestResult) -> float | None:
        if r.e2e is None or r.ttft is None or r.output_tokens < 2:
            return None
        return (r.e2e - r.ttft) / (r.output_tokens - 1)

    def gaps(rows: list[RequestResult]) -> list[float]:
        return [gap for r in rows if (gap := itl(r)) is not None]

    before = [r for r in ok if r.start < at]
    after = [r for r in ok if r.start >= at]
    return HangupSummary(
        at_s=None if wave.at_s is None else round(wave.at_s, 3),
        leavers=wave.leavers,
        stayers=wave.stayers,
        cut=sum(r.outcome == "disconnected" and wave.leaves(r.user) for r in results),
        running_before=wave.running_before,
        engine_stop_s=None if wave.engine_stop_s is None else round(wave.engine_stop_s, 3),
        stayers_ttft_before_ms=ms_percentiles([r.ttft for r in before if r.ttft is not None]),
        stayers_ttft_after_ms=ms_percentiles([r.ttft for r in after if r.ttft is not None]),
        stayers_itl_before_ms=ms_percentiles(gaps(before)),
        stayers_itl_after_ms=ms_percentiles(gaps(after)),
        stayers_errors=sum(r.outcome in ("error", "timeout") for r in stayed),
    )
