"""The live requests (being validated, queued in llmd, or relayed to the engine), so a drain
can wait for them or end them in-band."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from llmd.admission.classes import Priority
from llmd.config import ANONYMOUS
from llmd.errors import ApiError
from llmd.status import MAX_SEQUENCES, SequenceStatus
from llmd.telemetry.gaps import TokenGaps
from llmd.telemetry.metrics import RequestPhase


@dataclasses.dataclass(eq=False)
class Exchange:
    """One client request relayed to the engine, and its record for telemetry.

    Times are `time.monotonic()` seconds; a field's note sits beside it.
    """

    request_id: str
    stream: bool
    # The request arrived; the exchange is made once its body is read.
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    queued_at: float | None = None  # validated, it joined admission's queue; None before
    task: asyncio.Task[None] | None = None  # does the upstream work
    response_started: bool = False  # whether an error must go in-band
    # Set (before cancelling `task`) when llmd, not the client, ends the request, so the client
    # gets that error rather than silence.
    abort_error: ApiError | None = None
    tenant: str = ANONYMOUS  # admission fills it
    request_class: str = Priority.NORMAL.label  # admission fills it
    prompt_tokens: int | None = None  # from validation: the longest prompt's
    input_tokens: int = 0  # every prompt's, once each: what usage and token budgets count
    # Validation bounded the prompts rather than counting them: `prompt_tokens` and
    # `input_tokens` are upper bounds until the answer's usage gives the engine's count.
    input_from_answer: bool = False
    max_tokens: int | None = None  # from validation: each sequence's output budget
    admitted_at: float | None = None  # released to a backend; None while validated or queued
    first_byte_at: float | None = None  # the first body chunk to the client: time to first token
    # The latest body chunk to the client: the backend's progress (llmd/daemon/watchdog.py).
    progress_at: float | None = None
    ended_at: float | None = None
    # So far: the usage figure when the engine sends one, else one per streamed event.
    output_tokens: int = 0
    # llmd asked the engine for the stream's usage (llmd/endpoints/stream_usage.py): its
    # usage event is kept from the client, and `fingerprint` (that engine's
    # `"system_fingerprint":"..."` bytes; b"": none) is put back on its finish events.
    usage_hidden: bool = False
    fingerprint: bytes = b""
    status: int | None = None  # the response's
    error_code: str | None = None  # when llmd answered an error
    # That error came before the request reached the engine (validation, admission): a
    # rejection, not a failure.
    rejected: bool = False
    client_gone: bool = False  # the client left first
    # The client has its whole answer (a stream's `data: [DONE]` went out): leaving after that
    # is no cancellation.
    answered: bool = False
    # When a send to the client began that has not returned yet: a client that stopped reading
    # (llmd/proxy/stalls.py ends those).
    send_since: float | None = None
    # When the latest send to the client that waited returned: llmd reads the backend again
    # from then, so the watchdog counts its silence from then (a send that returns at once
    # leaves it: `progress_at` is as late).
    resumed_at: float | None = None
    model: str | None = None  # the pool it asked for
    backend: str | None = None  # where it runs; None while queued
    # The engine's, from the answer: `length` when any choice was cut off by max_tokens or the
    # context; None: none seen.
    finish_reason: str | None = None
    has_text: bool = False  # the answer carried some output text
    # Its canary key, set while a canary splits its pool (llmd/routing/canary.py).
    conversation: str | None = None
    # A stream's gaps between the chunks sent to the client (client-side inter-token latency).
    gaps: TokenGaps | None = None
    # The client's W3C trace context (traceparent, tracestate), and the spans begun for it
    # (the tracer's own, llmd/telemetry/tracing.py).
    trace_context: tuple[tuple[str, str], ...] = ()
    trace: Any = None
    endpoint: str = "chat"  # its entry's name in the endpoint table (llmd/endpoints/table.py)
    path: str = "/v1/chat/completions"  # the path it asked for (sent to the backend as it is)

    @property
    def phase(self) -> RequestPhase:
        """`queued` (not yet released: validated or waiting in the queue), `prefill` (no output
        yet) or `decode`."""
        if self.admitted_at is None:
            return RequestPhase.QUEUED
        return RequestPhase.PREFILL if self.first_byte_at is None else RequestPhase.DECODE

    def chunk_sent(self, now: float) -> None:
        """A body chunk goes to the client at `now` (monotonic s): a stream's gaps."""
        if self.stream:
            if self.gaps is None:
                self.gaps = TokenGaps()
            self.gaps.chunk(now)

    def queue_ms(self) -> float:
        """Milliseconds waited for admission (so far, while still queued; 0 if it never
        joined the queue)."""
        if self.queued_at is None:
            return 0.0
        return ((self.admitted_at or time.monotonic()) - self.queued_at) * 1000

    def as_snapshot(self, now: float) -> SequenceStatus:
        """This request as one row of the Status's sequences, at `now` (monotonic s)."""
        first = self.first_byte_at
        decode_s = now - first if first is not None else 0.0
        return SequenceStatus(
            id=self.request_id,
            tenant=self.tenant,
            request_class=self.request_class,
            phase=self.phase,
            stream=self.stream,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            age_s=round(now - self.started_at, 3),
            ttft_s=round(first - self.started_at, 4) if first is not None else None,
            tokens_per_s=round(self.output_tokens / decode_s, 1) if decode_s > 0.05 else None,
            model=self.model,
            backend=self.backend,
            endpoint=self.endpoint,
        )


@dataclasses.dataclass(frozen=True)
class InFlightSnapshot:
    """The in-flight registry's part of the Status: how many live requests are relayed to a
    backend (`count`) and how many wait in llmd (`queued`: validated or in admission's queue),
    the oldest `MAX_SEQUENCES` of all as rows, the relayed ones by tenant and by backend, and
    all of them by endpoint (relayed, queued)."""

    count: int
    queued: int
    sequences: tuple[SequenceStatus, ...]
    by_tenant: dict[str, int]
    by_backend: dict[str, int]
    by_endpoint: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)


class InFlight:
    """The set of live exchanges, with drain helpers."""

    def __init__(self) -> None:
        self._exchanges: set[Exchange] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._removed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._exchanges)

    def exchanges(self) -> list[Exchange]:
        """The live exchanges, oldest first."""
        return sorted(self._exchanges, key=lambda exchange: exchange.started_at)

    def relayed(self) -> int:
        """Live requests released to the engine (the rest wait in llmd)."""
        return sum(exchange.admitted_at is not None for exchange in self._exchanges)

    def as_snapshot(self, now: float) -> InFlightSnapshot:
        """The live requests at `now` (monotonic s), for the Status."""
        exchanges = self.exchanges()
        by_tenant: dict[str, int] = {}
        by_backend: dict[str, int] = {}
        by_endpoint: dict[str, tuple[int, int]] = {}
        relayed = 0
        for exchange in exchanges:
            live, queued = by_endpoint.get(exchange.endpoint, (0, 0))
            if exchange.admitted_at is None:
                by_endpoint[exchange.endpoint] = (live, queued + 1)
            else:
                by_endpoint[exchange.endpoint] = (live + 1, queued)
                relayed += 1
                by_tenant[exchange.tenant] = by_tenant.get(exchange.tenant, 0) + 1
                if exchange.backend is not None:
                    by_backend[exchange.backend] = by_backend.get(exchange.backend, 0) + 1
        rows = tuple(exchange.as_snapshot(now) for exchange in exchanges[:MAX_SEQUENCES])
        return InFlightSnapshot(
            relayed, len(exchanges) - relayed, rows, by_tenant, by_backend, by_endpoint
        )

    def add(self, exchange: Exchange) -> None:
        self._exchanges.add(exchange)
        self._idle.clear()

    def find(self, request_id: str) -> Exchange | None:
        """The live exchange with `request_id`, if any."""
        return next((e for e in self._exchanges if e.request_id == request_id), None)

    def remove(self, exchange: Exchange) -> None:
        self._exchanges.discard(exchange)
        self._removed.set()
        if not self._exchanges:
            self._idle.set()

    def on_backend(self, backend: str) -> list[Exchange]:
        """The live exchanges running on `backend`."""
        return [e for e in self._exchanges if e.backend == backend]

    async def wait_idle(self, timeout_s: float, backend: str | None = None) -> bool:
        """Wait until no exchange is live (none on `backend`, when given), at most `timeout_s`
        seconds; True when idle."""
        try:
            if backend is None:
                await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
                return True
            async with asyncio.timeout(timeout_s):
                while self.on_backend(backend):
                    self._removed.clear()
                    await self._removed.wait()
        except TimeoutError:
            return False
        return True

    def end_stalled(self, since: float) -> list[Exchange]:
        """End (cancel, without an answer) every exchange whose send to its client has been
        blocked since before `since` (monotonic s): the client stopped reading. The ended ones."""
        ended = []
        for exchange in self._exchanges:
            started = exchange.send_since
            if started is not None and started < since and exchange.task is not None:
                exchange.send_since = None
                exchange.error_code = "slow_consumer"
                exchange.task.cancel()
                ended.append(exchange)
        return ended

    def abort(self, exchange: Exchange, error: ApiError) -> bool:
        """End `exchange` with `error` (in-band once its response started); False if done."""
        if exchange.task is None or exchange.task.done():
            return False
        exchange.abort_error = error
        exchange.task.cancel()
        return True

    def abort_all(self, error: ApiError, backend: str | None = None) -> int:
        """End every live exchange (every one on `backend`, when given) with `error`; how
        many were ended."""
        ended = self.on_backend(backend) if backend is not None else list(self._exchanges)
        return sum(self.abort(exchange, error) for exchange in ended)
