"""The warm-up: one short request through a booted engine before it counts as serving.

`/health` 200 says the API server is up; it does not say a request gets through the whole
chain (tokenizer, scheduler, model, sampler). The first request also pays the engine's
first-use costs (kernel compilation, caches, the first allocation of activations), which would
otherwise fall on a user. So after `/health`, the supervisor sends one completion of a few
greedy tokens (an embeddings request to a pooling engine, `--runner pooling`); only when it
succeeds does the engine serve: `/ready`, routing, systemd's READY=1, an operator's restart, a
deploy's smoke gate and canary all wait for it.
"""

from __future__ import annotations

import json
import time
from typing import NamedTuple

from llmd.config import EngineConfig
from llmd.engine.args import engine_auth_headers, engine_flag
from llmd.engine.fingerprint import fingerprint_of
from llmd.engine.runner import EngineKind, engine_kind
from llmd.engine.wire import Pool

# Output tokens of the warm-up generation: enough for a decode step after the prefill.
WARMUP_MAX_TOKENS = 4
WARMUP_REQUEST_ID = "llmd-warmup"


def warmup_request(engine: EngineConfig) -> tuple[str, dict[str, object]]:
    """The path and body of `engine`'s warm-up: a greedy completion of `WARMUP_MAX_TOKENS`
    tokens of `engine.warmup_prompt`, or its embedding for a pooling engine. It names the
    model the engine answers to: the first of a `--served-model-name` in `engine.args` (which
    overrides llmd's own, as vLLM's argparse reads the last), else `engine.model_name`."""
    model = engine_flag(engine.args, "--served-model-name") or engine.model_name
    if engine_kind(engine.args) is EngineKind.POOLING:
        return "/v1/embeddings", {"model": model, "input": engine.warmup_prompt}
    return "/v1/completions", {
        "model": model,
        "prompt": engine.warmup_prompt,
        "max_tokens": WARMUP_MAX_TOKENS,
        "temperature": 0,
    }


class WarmedUp(NamedTuple):
    """How a warm-up went: how long it took (s), what failed (one line; None: it succeeded,
    a 200 whose JSON has the list of `choices`, or of `data` for embeddings), and the
    engine's `system_fingerprint` member as its answer carried it (llmd/engine/fingerprint.py;
    None: failed, or no such key: a pooling answer)."""

    took_s: float
    failure: str | None
    fingerprint: bytes | None = None


async def warm_up(probe: Pool, engine: EngineConfig, timeout_s: float) -> WarmedUp:
    """Send `engine`'s warm-up on `probe` (a pool on its socket), waiting up to `timeout_s`
    seconds; how it went."""
    path, body = warmup_request(engine)
    headers = {
        **engine_auth_headers(engine),
        "x-request-id": WARMUP_REQUEST_ID,
        "content-type": "application/json",
    }
    started = time.monotonic()
    try:
        answer = await probe.fetch(
            "POST", path, json.dumps(body).encode(), headers, timeout_s=max(timeout_s, 1.0)
        )
    except (TimeoutError, OSError) as exc:
        failure = f"{type(exc).__name__}: {exc}".rstrip(": ")
        return WarmedUp(
            time.monotonic() - started, f"the warm-up request to {path} failed: {failure}"
        )
    took = time.monotonic() - started
    text = answer.text()
    if answer.status != 200:
        return WarmedUp(
            took, f"the warm-up request to {path} answered HTTP {answer.status}: {text[:200]}"
        )
    try:
        output = json.loads(text)
    except ValueError:
        output = None
    if not isinstance(output, dict) or not isinstance(
        output.get("choices", output.get("data")), list
    ):
        return WarmedUp(took, f"the warm-up request to {path} answered no output: {text[:200]}")
    return WarmedUp(took, None, fingerprint_of(answer.body))
