"""An upstream llmd routes to but does not supervise: its published state and its probe.

The probe asks `GET /v1/models` every `routing.probe_interval_s`:
- an answer with a model list is a success for the upstream's circuit breaker
  (llmd/routing/breaker.py), anything else (a refused connection, a timeout, a 5xx, no list) a
  failure;
- it is also how llmd learns what an upstream serves when its config gives no `models`, and
  each model's card (`max_model_len`, `root`) for llmd's own `/v1/models`;
- while the breaker is open no probe is sent; once its cooldown has passed the probe (or a
  request) is the half-open trial.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import structlog

from llmd.engine.client import EngineClient
from llmd.routing.breaker import BreakerState, CircuitBreaker

log = structlog.get_logger("llmd.upstream")

PROBE_TIMEOUT_S = 5.0


@dataclasses.dataclass
class UpstreamState:
    """One upstream as llmd knows it: its `url`, the `models` it serves (the config's, else the
    last /v1/models answer; empty until one came), the model `cards` of that answer, and the
    last probe: when (monotonic s), whether it succeeded, and why not."""

    name: str
    url: str
    configured: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    cards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    probed_at: float | None = None
    healthy: bool | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        self.models = self.models or self.configured

    def max_model_len(self, model: str) -> int | None:
        """The context length its /v1/models gives for `model`, when it gave one."""
        value = self.cards.get(model, {}).get("max_model_len")
        return value if isinstance(value, int) and value > 0 else None

    def phase(self, breaker: BreakerState) -> str:
        """`serving` (a probe succeeded, breaker closed and models known), `unreachable`
        (open), `probing` (half-open), or `unknown` (no answer yet, or the last probe failed:
        llmd routes to an upstream only once a probe of it succeeded)."""
        if breaker is BreakerState.OPEN:
            return "unreachable"
        if breaker is BreakerState.HALF_OPEN:
            return "probing"
        return "serving" if self.models and self.healthy else "unknown"


async def probe_once(
    state: UpstreamState, client: EngineClient, breaker: CircuitBreaker
) -> tuple[str, ...] | None:
    """One probe, its outcome recorded in `state` and `breaker`; the model names the upstream
    listed (None: the probe failed, or was not sent because the breaker is open)."""
    now = time.monotonic()
    if not breaker.available(now):
        return None
    breaker.on_attempt(now)
    try:
        answer = await client.fetch("GET", "/v1/models", timeout_s=PROBE_TIMEOUT_S)
        listed = answer.json() if answer.status == 200 else None
    except (TimeoutError, OSError, ValueError) as exc:
        _failed(state, breaker, f"{type(exc).__name__}: {exc}".rstrip(": "))
        return None
    cards = _cards(listed)
    if cards is None:
        _failed(state, breaker, f"GET /v1/models answered {answer.status} without a model list")
        return None
    state.probed_at, state.healthy, state.error = time.monotonic(), True, None
    state.cards = cards
    breaker.record_success(time.monotonic())
    return tuple(cards)


async def run_probe(
    state: UpstreamState,
    client: EngineClient,
    breaker: CircuitBreaker,
    interval_s: Callable[[], float],
    on_models: Callable[[tuple[str, ...]], None],
) -> None:
    """Probe until cancelled, every `interval_s()` seconds; `on_models` gets the models of
    each answer (the caller decides whether they replace the configured ones)."""
    while True:
        models = await probe_once(state, client, breaker)
        if models is not None:
            on_models(models)
        await asyncio.sleep(interval_s())


def _failed(state: UpstreamState, breaker: CircuitBreaker, error: str) -> None:
    if state.healthy is not False or state.error != error:
        log.warning("upstream_probe_failed", upstream=state.name, error=error)
    state.probed_at, state.healthy, state.error = time.monotonic(), False, error
    breaker.record_failure(time.monotonic())


def _cards(answer: Any) -> dict[str, dict[str, Any]] | None:
    """Model id -> its card from an OpenAI /v1/models answer, or None when it is not one."""
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        return None
    cards = {
        str(card["id"]): card
        for card in answer["data"]
        if isinstance(card, dict) and isinstance(card.get("id"), str)
    }
    return cards or None
