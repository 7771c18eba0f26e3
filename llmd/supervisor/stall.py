"""The stall rule, one watch per backend: an engine with sequences running and no token for its
stall timeout is stalled; a relayed request with no byte for its idle timeout is. Pure: fed the
engine's scrapes and llmd's own requests there, the clock passed in (monotonic seconds).

- Progress is any token the engine's counters (`vllm:generation_tokens_total`,
  `vllm:prompt_tokens_total`) show, credited when the scrape that shows it was read, and any
  byte of a request there reaching llmd.
- Busy is `vllm:num_requests_running` > 0, or a request of llmd's relayed there: vLLM's gauges
  stop with its engine core (ENGINE.md: a SIGSTOPped EngineCore leaves them as they were).
- Only time llmd waited on the backend counts: a request whose send to its client waits
  (`held`: llmd reads no more of it meanwhile) is neither busy nor idle, and its silence
  counts from that send's return. A slow client is the send timeout's to end
  (llmd/proxy/stalls.py), never a stall. vLLM's core (and the simulator's) generates on
  while its API server cannot write, so its counters still tell a stall of its own.
- The timeout runs from the later of the last progress and the start of the busy spell, and
  grows by the prefill time of the prompts there not yet begun (their tokens at the engine's
  measured seconds per prompt token, x PREFILL_MARGIN): a long prefill is not a stall.
- Judged only on a scrape *sent* after the deadline (a /metrics read may take 1-3 s under
  load, ENGINE.md): a slow scrape delays the verdict, never makes it. An engine without token
  counters is judged by llmd's streams alone (a non-streamed answer shows nothing until done).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.engine.metrics import EngineSample

# The automatic stall timeout: 100 x the engine's mean inter-token latency, at least 30 s (a
# healthy engine with sequences running produces a token every step; vLLM's longest steps, a
# chunk of prefill on a slow device, take seconds, not tens of seconds).
STALL_FLOOR_S = 30.0
ITL_FACTOR = 100.0
# The automatic request idle timeout, in stall timeouts: a whole-engine stall is the watch's
# to find first (it restarts the engine); the request rule catches one request stuck alone.
IDLE_FACTOR = 2.0
# A prompt's prefill time: its tokens x the measured seconds per prompt token x this margin
# (the measure is a mean, and attention grows with the prompt), or, before the engine has
# measured any, x UNMEASURED_S_PER_TOKEN (500 tokens/s: slower than any GPU's prefill).
PREFILL_MARGIN = 4.0
UNMEASURED_S_PER_TOKEN = 0.002
# A non-streamed answer shows nothing until it is whole, and its engine's counters move for
# every request there: however busy the engine, it is given up once its output budget at the
# measured mean inter-token latency x this margin has passed (beyond its idle timeout).
OUTPUT_MARGIN = 4.0


@dataclasses.dataclass(frozen=True)
class Relayed:
    """One of llmd's requests on the backend, as the rule reads it (times monotonic s)."""

    admitted_at: float  # sent to the backend
    progress_at: float | None  # its latest byte from the backend; None: none yet
    stream: bool
    prompt_tokens: int = 0
    max_tokens: int | None = None  # each sequence's output budget (None: not known)
    held: bool = False  # a send to its client waits: llmd holds off reading the backend
    resumed_at: float | None = None  # its latest send to the client returned; None: none yet

    @property
    def started(self) -> bool:
        """It has had a byte: a stream's prefill is over."""
        return self.progress_at is not None

    @property
    def waiting_since(self) -> float:
        """Since when llmd has waited on the backend for its next byte (monotonic s): its
        latest byte, or the return of its latest send to the client (a wait for the client is
        not the backend's), or its start."""
        return max(self.admitted_at, self.progress_at or 0.0, self.resumed_at or 0.0)


@dataclasses.dataclass(frozen=True)
class Stall:
    """A verdict: no progress for `waited_s` (s) against a limit of `timeout_s` plus
    `prefill_s` of prompts not yet begun; `running` sequences by the engine's gauge (None:
    no gauge), `requests` of llmd's there."""

    waited_s: float
    timeout_s: float
    prefill_s: float
    running: int | None
    requests: int

    @property
    def detail(self) -> str:
        """One line for the log, the exit's detail and the client's error message."""
        running = "" if self.running is None else f", {self.running} sequences running"
        prefill = f" + {self.prefill_s:.1f} s of prefill" if self.prefill_s >= 0.05 else ""
        return (
            f"no token for {self.waited_s:.1f} s{running}, {self.requests} of llmd's requests "
            f"there (limit {self.timeout_s:g} s{prefill})"
        )


def stall_timeout(configured_s: float, mean_itl_s: float | None) -> float:
    """The stall timeout in seconds: `configured_s` when set (> 0), else max(STALL_FLOOR_S,
    ITL_FACTOR x the engine's measured mean inter-token latency `mean_itl_s`)."""
    if configured_s > 0:
        return configured_s
    return max(STALL_FLOOR_S, ITL_FACTOR * (mean_itl_s or 0.0))


def idle_timeout(configured_s: float, stall_timeout_s: float) -> float:
    """The request idle timeout in seconds: `configured_s` when set (> 0), else IDLE_FACTOR x
    the stall timeout in force."""
    return configured_s if configured_s > 0 else IDLE_FACTOR * stall_timeout_s


def prefill_allowance(prompt_tokens: int, s_per_token: float | None) -> float:
    """Seconds `prompt_tokens` may take in prefill: at the measured `s_per_token` x
    PREFILL_MARGIN, or UNMEASURED_S_PER_TOKEN before the engine measured any."""
    if s_per_token is None:
        return prompt_tokens * UNMEASURED_S_PER_TOKEN
    return prompt_tokens * s_per_token * PREFILL_MARGIN


class StallWatch:
    """One backend's watch from `now` (it began serving then): `observe` each scrape,
    `stalled(now, requests)` for the engine, `idle_past(now, request, requests)` for one
    request. `stall_timeout_s` and `idle_timeout_s` are the configured values (0: automatic)."""

    def __init__(self, stall_timeout_s: float, idle_timeout_s: float, now: float) -> None:
        self.configured = stall_timeout_s
        self.configured_idle = idle_timeout_s
        self.progress_at = now  # the engine's latest sign of progress
        self.sample: EngineSample | None = None
        self._counters: tuple[float, float] | None = None  # (prompt, generation) last read
        self._running_since: float | None = None

    def observe(self, sample: EngineSample) -> None:
        """Take a scrape: counters that moved since the last one are progress (as of when
        this one was read); `running` > 0 starts or continues a busy spell."""
        self.sample = sample
        prompt, generation = sample.prompt_tokens_total, sample.generation_tokens_total
        if prompt is None or generation is None:
            self._counters = None
            return
        if self._counters is not None and (prompt, generation) != self._counters:
            self.progress_at = max(self.progress_at, sample.taken_at)
        self._counters = (prompt, generation)
        if sample.running:
            if self._running_since is None:
                self._running_since = _sent(sample)
        else:
            self._running_since = None

    @property
    def counted(self) -> bool:
        """The engine publishes token counters (its progress is known without llmd's bytes)."""
        return self._counters is not None

    def timeout_s(self) -> float:
        """The stall timeout in force (the automatic one follows the measured latency)."""
        return stall_timeout(self.configured, self.sample.mean_itl_s if self.sample else None)

    def prefill_s(self, requests: Sequence[Relayed]) -> float:
        """The prefill allowance for `requests` that have had no byte yet."""
        pending = sum(r.prompt_tokens for r in requests if not r.started)
        measured = self.sample.prefill_s_per_token if self.sample is not None else None
        return prefill_allowance(pending, measured)

    def stalled(self, now: float, requests: Sequence[Relayed]) -> Stall | None:
        """The verdict on the engine at `now`, given llmd's `requests` relayed there: a Stall,
        or None (progressing, idle, or not judged yet). Those `held` are not busy."""
        progress = max(
            [self.progress_at, *(r.progress_at for r in requests if r.progress_at is not None)]
        )
        waiting = [r for r in requests if not r.held]
        busy = [r.waiting_since for r in waiting]
        if self._running_since is not None:
            busy.append(self._running_since)
        if not busy:
            return None
        start = max(progress, min(busy))
        timeout, prefill = self.timeout_s(), self.prefill_s(waiting)
        deadline = start + timeout + prefill
        if now <= deadline:
            return None
        if self.counted:
            assert self.sample is not None
            if _sent(self.sample) < deadline:
                return None  # no scrape sent since the deadline shows the counters still
        elif not any(r.stream for r in waiting):
            return None  # nothing would show progress: not judged
        running = self.sample.running if self.sample is not None else None
        return Stall(now - start, timeout, prefill, running, len(requests))

    def idle_past(self, now: float, request: Relayed, requests: Sequence[Relayed]) -> Stall | None:
        """The verdict on one `request` at `now` (`requests`: all of llmd's on the backend,
        for the prefill allowance): a stream idle past its limit since llmd began waiting on it
        (`waiting_since`). A non-streamed request is idle since the engine's last counted
        progress (judged on a scrape sent after the deadline; not at all without counters),
        and overdue once its output budget had time to come out (`OUTPUT_MARGIN`), however
        busy the engine. A `held` request is not judged."""
        if request.held:
            return None
        since = request.waiting_since
        timeout = idle_timeout(self.configured_idle, self.timeout_s())
        prefill = 0.0 if request.started else self.prefill_s(requests)
        running = self.sample.running if self.sample is not None else None
        if request.stream:
            if now <= since + timeout + prefill:
                return None
            return Stall(now - since, timeout, prefill, running, len(requests))
        itl = self.sample.mean_itl_s if self.sample is not None else None
        if request.max_tokens and itl:
            output = request.max_tokens * itl * OUTPUT_MARGIN
            if now > request.admitted_at + timeout + prefill + output:
                return Stall(now - since, timeout + output, prefill, running, len(requests))
        if not self.counted:
            return None
        assert self.sample is not None
        since = max(since, self.progress_at)
        deadline = since + timeout + prefill
        if now <= deadline or _sent(self.sample) < deadline:
            return None
        return Stall(now - since, timeout, prefill, running, len(requests))


def _sent(sample: EngineSample) -> float:
    return sample.sent_at if sample.sent_at is not None else sample.taken_at
