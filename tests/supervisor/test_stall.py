"""The stall rule: progress by the engine's counters or llmd's bytes, busy by the engine's gauge or
llmd's requests, the prefill allowance, the automatic timeouts, slow scrapes never firing it,
the per-request idle verdict, and a request held for its slow client counted neither way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.engine.metrics import EngineSample
from llmd.supervisor.stall import (
    STALL_FLOOR_S,
    Relayed,
    StallWatch,
    idle_timeout,
    prefill_allowance,
    stall_timeout,
)


def scrape(sent: float, generated: float, running: int = 1, *, read: float | None = None,
           prompt: float = 100.0, itl: tuple[float, float] | None = None,
           ttft_s: float | None = None) -> EngineSample:  # fmt: skip
    """A scrape sent at `sent`, read at `read` (default: at once)."""
    return EngineSample(
        taken_at=sent if read is None else read,
        sent_at=sent,
        running=running,
        prompt_tokens_total=prompt,
        generation_tokens_total=generated,
        itl_seconds_total=itl[0] if itl else None,
        itl_count=itl[1] if itl else None,
        ttft_seconds_total=ttft_s,
    )


def test_frozen_counters_with_sequences_running_are_a_stall_after_the_timeout() -> None:
    """Counters that stop while the gauge says running: stalled once a scrape sent past the
    timeout shows them still; not before."""
    watch = StallWatch(stall_timeout_s=5.0, idle_timeout_s=0.0, now=0.0)
    watch.observe(scrape(1.0, 10))
    watch.observe(scrape(2.0, 20))  # progress, read at 2.0
    watch.observe(scrape(6.5, 20))
    assert watch.stalled(6.9, []) is None  # 4.9 s without a token
    watch.observe(scrape(7.5, 20))
    stall = watch.stalled(7.5, [])
    assert stall is not None and stall.waited_s == 5.5 and stall.running == 1
    assert "no token for 5.5 s, 1 sequences running" in stall.detail


def test_a_slow_scrape_never_makes_the_verdict() -> None:
    """A scrape sent before the deadline and read long after it is no evidence: the verdict
    waits for one sent past the deadline, however late the clock is."""
    watch = StallWatch(stall_timeout_s=5.0, idle_timeout_s=0.0, now=0.0)
    watch.observe(scrape(0.5, 10))
    watch.observe(scrape(1.0, 20))
    watch.observe(scrape(5.9, 20, read=9.0))  # 3.1 s in flight
    assert watch.stalled(9.0, []) is None
    watch.observe(scrape(9.0, 20, read=9.2))
    assert watch.stalled(9.2, []) is not None


def test_tokens_or_bytes_are_progress_and_an_idle_engine_is_no_stall() -> None:
    """Moving counters, or a byte of llmd's request there, keep the engine from a verdict; an
    engine with nothing running and no request of llmd's is never stalled."""
    watch = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    for t in range(1, 20):
        watch.observe(scrape(float(t), float(t)))
        assert watch.stalled(float(t), []) is None
    frozen = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    streaming = Relayed(admitted_at=0.5, progress_at=None, stream=True)
    for t in range(1, 20):
        frozen.observe(scrape(float(t), 5.0))
        streaming = Relayed(0.5, float(t), stream=True)
        assert frozen.stalled(float(t), [streaming]) is None
    idle = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    for t in range(1, 20):
        idle.observe(scrape(float(t), 5.0, running=0))
        assert idle.stalled(float(t), []) is None


def test_a_request_admitted_to_an_engine_whose_gauges_froze_is_a_stall() -> None:
    """An engine stopped while idle keeps its gauge at 0 (vLLM's come from its core): a request
    of llmd's there that gets nothing makes it busy, from when it was sent."""
    watch = StallWatch(stall_timeout_s=3.0, idle_timeout_s=0.0, now=0.0)
    for t in range(1, 11):
        watch.observe(scrape(float(t), 5.0, running=0))
    waiting = [Relayed(admitted_at=8.0, progress_at=None, stream=False, prompt_tokens=0)]
    assert watch.stalled(10.5, waiting) is None
    watch.observe(scrape(11.5, 5.0, running=0))
    stall = watch.stalled(11.5, waiting)
    assert stall is not None and stall.waited_s == 3.5 and stall.requests == 1


def test_a_long_prefill_is_allowed_its_time() -> None:
    """Prompts that have had no byte yet add their prefill time, at the engine's measured
    seconds per prompt token (TTFT sum over prompt tokens) x 4, before the verdict."""
    watch = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    huge = Relayed(admitted_at=1.0, progress_at=None, stream=True, prompt_tokens=100_000)
    measured = {"prompt": 1000.0, "ttft_s": 1.0}  # 1 ms a prompt token: 400 s for 100k
    for t in (1.0, 100.0, 402.0):
        watch.observe(scrape(t, 5.0, **measured))  # type: ignore[arg-type]
        assert watch.stalled(t, [huge]) is None
    watch.observe(scrape(403.5, 5.0, **measured))  # type: ignore[arg-type]
    stall = watch.stalled(403.5, [huge])
    assert stall is not None and stall.prefill_s == 400.0
    assert prefill_allowance(1000, None) == 2.0  # unmeasured: 500 tokens/s


def test_the_automatic_timeouts() -> None:
    """0 means automatic: max(30 s, 100 x the mean inter-token latency); the idle timeout
    twice the stall timeout in force; a set value is used as it is."""
    assert stall_timeout(0.0, None) == STALL_FLOOR_S == stall_timeout(0.0, 0.05)
    assert stall_timeout(0.0, 0.5) == 50.0 and stall_timeout(7.0, 0.5) == 7.0
    assert idle_timeout(0.0, 50.0) == 100.0 and idle_timeout(9.0, 50.0) == 9.0
    watch = StallWatch(0.0, 0.0, now=0.0)
    watch.observe(scrape(1.0, 10, itl=(80.0, 100.0)))  # 0.8 s mean
    assert watch.timeout_s() == 80.0


def test_without_counters_only_streams_tell() -> None:
    """An engine that publishes no token counters is judged by llmd's streams alone: idle
    streams past the timeout are a stall, non-streamed requests alone are never judged."""
    watch = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    whole = Relayed(admitted_at=0.0, progress_at=None, stream=False)
    stream = Relayed(admitted_at=0.0, progress_at=1.0, stream=True)
    assert watch.stalled(100.0, [whole]) is None
    assert watch.stalled(2.9, [whole, stream]) is None
    assert watch.stalled(3.1, [whole, stream]) is not None


def test_a_request_idle_past_its_timeout() -> None:
    """A stream idle since its last byte past the idle timeout; one in prefill gets the
    allowance; a non-streamed request progresses with the engine's counters, and is not
    judged on an engine without them."""
    watch = StallWatch(stall_timeout_s=2.0, idle_timeout_s=5.0, now=0.0)
    stream = Relayed(admitted_at=0.0, progress_at=3.0, stream=True)
    assert watch.idle_past(7.9, stream, [stream]) is None
    assert watch.idle_past(8.1, stream, [stream]) is not None
    waiting = Relayed(admitted_at=0.0, progress_at=None, stream=True, prompt_tokens=1000)
    assert watch.idle_past(6.9, waiting, [waiting]) is None  # 5 s + 2 s of prefill
    assert watch.idle_past(7.1, waiting, [waiting]) is not None
    whole = Relayed(admitted_at=0.0, progress_at=None, stream=False)
    assert watch.idle_past(100.0, whole, [whole]) is None  # no counters
    for t in range(1, 30):
        watch.observe(scrape(float(t), float(t)))
        assert watch.idle_past(float(t), whole, [whole]) is None
    watch.observe(scrape(35.0, 29.0))
    assert watch.idle_past(35.0, whole, [whole]) is not None


def test_a_non_streamed_request_is_overdue_once_its_budget_had_time() -> None:
    """However busy the engine (its counters moving), a non-streamed request is given up
    once its max_tokens at 4 x the mean inter-token latency, past its idle timeout, passed."""
    watch = StallWatch(stall_timeout_s=2.0, idle_timeout_s=5.0, now=0.0)
    whole = Relayed(admitted_at=0.0, progress_at=None, stream=False, max_tokens=100)
    for t in range(1, 46):  # 10 ms a token: 100 x 0.01 x 4 = 4 s, + 5 s idle
        watch.observe(scrape(t / 5, float(t), itl=(0.01 * t, float(t))))
        assert watch.idle_past(t / 5, whole, [whole]) is None
    stall = watch.idle_past(9.05, whole, [whole])
    assert stall is not None and stall.timeout_s == 9.0


def test_a_request_llmd_holds_for_its_client_is_neither_busy_nor_idle() -> None:
    """A stream whose send to its slow client waits (`held`) makes no engine busy and is not
    idle however long it waits (the send timeout ends it); once the send returns, its silence
    counts from then, not from its last byte."""
    watch = StallWatch(stall_timeout_s=1.0, idle_timeout_s=1.0, now=0.0)
    held = Relayed(admitted_at=0.0, progress_at=2.0, stream=True, held=True)
    for t in range(3, 30):  # the engine has finished: counters still, nothing running
        watch.observe(scrape(float(t), 50.0, running=0))
        assert watch.stalled(float(t), [held]) is None
        assert watch.idle_past(float(t), held, [held]) is None
    resumed = Relayed(admitted_at=0.0, progress_at=2.0, stream=True, resumed_at=29.5)
    watch.observe(scrape(30.4, 50.0, running=0))
    assert watch.stalled(30.4, [resumed]) is None
    assert watch.idle_past(30.4, resumed, [resumed]) is None
    watch.observe(scrape(30.6, 50.0, running=0))
    stall = watch.stalled(30.6, [resumed])
    assert stall is not None and round(stall.waited_s, 6) == 1.1
    assert watch.idle_past(30.6, resumed, [resumed]) is not None


def test_a_held_request_hides_no_stall_of_the_engine() -> None:
    """With one stream held for its client, an engine whose counters stop while its gauge says
    running, or whose other streams get nothing, is stalled after the timeout as ever."""
    held = Relayed(admitted_at=0.0, progress_at=1.0, stream=True, held=True)
    frozen = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    frozen.observe(scrape(1.0, 10.0))
    frozen.observe(scrape(2.0, 20.0))
    frozen.observe(scrape(4.5, 20.0))
    assert frozen.stalled(4.5, [held]) is not None
    silent = StallWatch(stall_timeout_s=2.0, idle_timeout_s=0.0, now=0.0)
    waiting = Relayed(admitted_at=0.5, progress_at=1.5, stream=True)
    assert silent.stalled(3.4, [held, waiting]) is None
    stall = silent.stalled(3.6, [held, waiting])
    assert stall is not None and stall.requests == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(min_value=0.01, max_value=4.9), min_size=1, max_size=60),
    st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=60),
    st.floats(min_value=0.1, max_value=1.0),
)
def test_an_engine_producing_within_the_timeout_is_never_stalled(
    gaps: list[float], latencies: list[float], interval: float
) -> None:
    """Tokens at gaps under the timeout (5 s), read by one scraper that sends `interval` after
    each answer, each read taking up to 3 s: no verdict while tokens come; once they stop for
    good, a verdict past the timeout and within a bound of it."""
    token_times, t = [], 0.0
    for gap in gaps:
        t += gap
        token_times.append(t)
    end = t
    watch = StallWatch(stall_timeout_s=5.0, idle_timeout_s=0.0, now=0.0)
    sent, i, verdict_at = 0.0, 0, None
    while verdict_at is None and sent < end + 60:
        read = sent + latencies[i % len(latencies)]
        produced = float(sum(1 for tt in token_times if tt <= sent))
        watch.observe(scrape(sent, produced, read=read))
        if watch.stalled(read, []) is not None:
            verdict_at = read
        sent, i = read + interval, i + 1
    assert verdict_at is not None and verdict_at > end + 5.0
    assert verdict_at <= end + 5.0 + 4 * (interval + 3.0)  # tokens seen late, then a scrape
