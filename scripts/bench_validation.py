"""Validation cost per request at 100, 1,000 and 8,000 prompt tokens (p50, p99), as a table.

Measures `Validator.check` end to end as the proxy calls it (field checks, the model name,
local token counting on the tokenizer thread, the context check, re-serialising on a clamp) for
chat and completions bodies. The context limit is set large (32,768) so that 8,000 tokens is
checked, not refused.

Usage: python scripts/bench_validation.py [MODEL_DIR] [--iterations N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from llmd.config import Config, EngineConfig
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.validation.fields import Endpoint, read_fields
from llmd.validation.validator import Validator

SIZES = (100, 1_000, 8_000)
LIMIT = 32_768
WORDS = [
    "the",
    "engine",
    "streams",
    "tokens",
    "to",
    "a",
    "client",
    "while",
    "你好",
    "queue",
    "waits",
    "😀",
    "and",
    "signals",
]


def text_of(validator: Validator, tokens: int, chat: bool) -> str:
    """A text that counts to about `tokens` prompt tokens (within 1%)."""
    assert validator.local is not None
    words: list[str] = []
    while True:
        words.extend(WORDS)
        text = " ".join(words)
        body: dict[str, Any] = (
            {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        )
        prompt = read_fields(Endpoint.CHAT if chat else Endpoint.COMPLETIONS, body).prompt
        if validator.local.count_now(prompt)[0] >= tokens:
            return text


async def measure(
    validator: Validator, endpoint: Endpoint, body: dict[str, Any], n: int
) -> list[float]:
    raw = json.dumps(body).encode()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await validator.check(endpoint, json.loads(raw), raw, [])
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="var/models/tiny")
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    config = Config(
        engine=EngineConfig(model=str(Path(args.model).resolve()), served_model_name="tiny")
    )
    state = EngineState(phase=EnginePhase.SERVING, max_model_len=LIMIT)
    validator = Validator(config, state, client=lambda: None)  # type: ignore[arg-type,return-value]
    await validator.load_tokenizer()
    if validator.local is None:
        raise SystemExit(f"no local tokenizer in {args.model}")
    print(f"validation cost per request, {args.iterations} runs each, tokenizer {args.model}")
    print(f"{'endpoint':<12} {'prompt tokens':>13} {'p50 ms':>8} {'p99 ms':>8}")
    for endpoint in (Endpoint.CHAT, Endpoint.COMPLETIONS):
        for size in SIZES:
            text = text_of(validator, size, endpoint is Endpoint.CHAT)
            body: dict[str, Any] = {"model": "tiny", "max_tokens": 256}
            if endpoint is Endpoint.CHAT:
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
            await measure(validator, endpoint, body, 20)  # warm up
            times = sorted(await measure(validator, endpoint, body, args.iterations))
            p50 = statistics.median(times)
            p99 = times[min(len(times) - 1, round(0.99 * len(times)))]
            print(f"{endpoint.value:<12} {size:>13,} {p50:>8.3f} {p99:>8.3f}")
    validator.close()


if __name__ == "__main__":
    asyncio.run(main())
