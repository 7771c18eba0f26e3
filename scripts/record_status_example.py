#!/usr/bin/env python3
"""Record tests/data/status_example.json: the Status of a live llmd on the simulator under load.

Starts `llmd serve` on etc/sim.toml with slow engine steps and a small KV cache (so sequences
stay active, some wait in llmd and some in the engine, and the KV gauge moves), sends 40
streaming requests, a few refused ones, one whose client leaves, and a few to other endpoints
(completions, tokenize, embeddings the chat engine refuses), then saves `GET /status`
from the admin socket. The TUI's snapshot tests render this file. Run from the repo root:
`.venv/bin/python scripts/record_status_example.py`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

OUT = REPO / "tests" / "data" / "status_example.json"
SIM_ARGS = ("--step-base-ms", "25", "--num-gpu-blocks", "24", "--max-num-seqs", "32")
# KV reservations past the cache, so that the example has every phase: sequences queued in llmd
# (the gate's KV budget), waiting in the engine (prefill) and decoding.
ADMISSION = {"kv_overcommit": 4.0}


def chat(text: str, max_tokens: int, stream: bool = True) -> dict[str, object]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


async def load(llmd: LlmdProcess) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=120) as client:

        async def stream(i: int) -> None:
            body = chat(f"Request {i}: " + "tell me a story " * (i % 7 + 1), 200 + 10 * i)
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for _ in response.aiter_bytes():
                    pass

        # Finished requests first, so the latency windows and throughput have figures.
        await asyncio.gather(*(client.post("/v1/chat/completions", json=chat("Hi", 20, False))
                               for _ in range(8)))  # fmt: skip
        for _ in range(3):
            await client.post("/v1/chat/completions", json=chat("x", 5000))  # context too long
        # Other endpoints: completions, the tokenizer llmd answers itself, and embeddings, which
        # the chat engine does not serve (400 unsupported_endpoint).
        completion = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 20}
        await client.post("/v1/completions", json=completion)
        for _ in range(4):
            await client.post("/tokenize", json={"model": "tiny", "prompt": "Hello there"})
        await client.post("/v1/embeddings", json={"model": "tiny", "input": "a document"})
        leaving = asyncio.create_task(stream(1))
        await asyncio.sleep(0.5)
        leaving.cancel()  # the client leaves mid-stream: a cancellation
        streams = [asyncio.create_task(stream(i)) for i in range(40)]
        await asyncio.sleep(3.0)
        admin = httpx.AsyncHTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
        async with httpx.AsyncClient(transport=admin, base_url="http://llmd") as admin_client:
            status: dict[str, object] = (await admin_client.get("/status")).json()
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, leaving, return_exceptions=True)
        return status


def main() -> None:
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), SIM_ARGS, admission=ADMISSION))
    try:
        llmd.wait_ready(timeout_s=60)
        status = asyncio.run(load(llmd))
    finally:
        llmd.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(status, indent=2) + "\n")
    sequences = status["sequences"]
    assert isinstance(sequences, list)
    print(f"wrote {OUT.relative_to(REPO)}: {len(sequences)} active sequences")


if __name__ == "__main__":
    main()
