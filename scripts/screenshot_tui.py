#!/usr/bin/env python3
"""Save docs/llmd-top.svg: llmd-top (160x48) on a live llmd on the simulator under load.

Starts `llmd serve` on etc/sim.toml with slow engine steps and a small KV cache, keeps 48
streams of mixed lengths in flight plus a few refused requests, runs the dashboard headless
for 15 refreshes (so the tokens/s sparkline has a history) and exports Textual's SVG
screenshot. Run from the repo root: `.venv/bin/python scripts/screenshot_tui.py`; convert with
e.g. `rsvg-convert docs/llmd-top.svg -o docs/llmd-top.png`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.tui.app import TopApp  # noqa: E402
from llmd.tui.client import DaemonClient  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

OUT = REPO / "docs" / "llmd-top.svg"
SIM_ARGS = ("--step-base-ms", "30", "--num-gpu-blocks", "40", "--max-num-seqs", "32")
REFRESHES = 15


async def load(llmd: LlmdProcess, stop: asyncio.Event) -> None:
    """48 streams kept in flight (each replaced when it ends) and a few refused requests."""
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=120) as client:

        async def stream(i: int) -> None:
            while not stop.is_set():
                body = {
                    "model": "tiny",
                    "prompt": "Tell me a story " * (i % 9 + 1),
                    "max_tokens": 100 + 37 * (i % 11),
                    "ignore_eos": True,
                    "stream": True,
                }
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    async for _ in response.aiter_bytes():
                        if stop.is_set():
                            return

        for _ in range(3):
            await client.post("/v1/completions", json={"model": "tiny", "prompt": "x",
                                                       "max_tokens": 5000})  # fmt: skip
        await asyncio.gather(*(stream(i) for i in range(48)), return_exceptions=True)


async def shoot(llmd: LlmdProcess) -> str:
    stop = asyncio.Event()
    traffic = asyncio.create_task(load(llmd, stop))
    await asyncio.sleep(4)
    app = TopApp(DaemonClient(llmd.runtime_dir / "admin.sock"), interval_s=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(REFRESHES)
        svg = app.export_screenshot(title="llmd-top")
    stop.set()
    traffic.cancel()
    await asyncio.gather(traffic, return_exceptions=True)
    return svg


def main() -> None:
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), SIM_ARGS))
    try:
        llmd.wait_ready(timeout_s=60)
        svg = asyncio.run(shoot(llmd))
    finally:
        llmd.stop()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(svg)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
