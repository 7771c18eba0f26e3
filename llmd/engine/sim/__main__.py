"""Entry point: `python -m llmd.engine.sim --model DIR --uds SOCKET [...]` (see options.py).

Boots like vLLM as llmd sees it: nothing listens until the model is "loaded" (after any
`--fault-boot-delay`), then `/health` is 200; SIGTERM or SIGINT stops it with status 0.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    gc.disable()  # while the simulator imports and builds itself: `start_collecting`

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable

from llmd.engine.sim.options import SimOptions, parse_options

log = logging.getLogger("vllm.entrypoints.openai.api_server")


def main() -> None:
    from llmd.engine.sim.logs import configure_logging

    options = parse_options()
    configure_logging()
    with asyncio.Runner(loop_factory=uvicorn_loop_factory()) as runner:
        code = runner.run(serve(options))
    exit_now(code)


def exit_now(code: int) -> None:
    """End the process with status `code` once its log lines are out, without the
    interpreter's teardown: freeing each of the 600-odd modules' objects one by one was about
    0.04 of the 0.4 CPU-s of a simulator's life (measured here, 2026-12-07), and nothing of
    the simulator's needs it (its server and engine are stopped, its only output is stdout
    and stderr). atexit functions do not run."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def start_collecting() -> None:
    """Turn the cyclic collector on again once start-up is over, with every object alive now
    moved out of its generations (`gc.freeze`), as `llmd serve` does its own start-up
    (`llmd.cli.import_daemon_modules`, `Housekeeping._freeze_start_up`).

    Run as `python -m llmd.engine.sim`, the simulator imports and builds itself with the
    collector off: its passes over start-up's objects, nearly all of which live as long as the
    process, took about 0.02 CPU-s of a start in-process (53 young and 6 older collections,
    `gc.callbacks`); a whole start measured 0.223 -> 0.217 CPU-s, median of 21 (here,
    2026-12-07, scripts/bench_sim_life.py). Start-up's garbage (about 700 objects) is frozen
    with the rest, not collected: that full collection would cost about 0.01 CPU-s of each
    start, to free a fixed few dozen kilobytes."""
    gc.freeze()
    gc.enable()


def uvicorn_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop uvicorn's `loop="auto"` picks, as vLLM 0.32 runs its API server:
    uvloop's where it is installed, else asyncio's (None)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def serve(options: SimOptions) -> int:
    """Boot, serve until a stop signal, stop; the process exit status."""
    from llmd.engine.sim.app import BootError, build_server, start
    from llmd.engine.sim.logs import log_stats

    log.info("vLLM API server version %s (llmd simulator)", options.vllm_version)
    log.info("non-default args: %s", options)
    faults = options.faults
    if faults.boot_delay_s:
        await asyncio.sleep(faults.boot_delay_s)
    if faults.boot_exit_code is not None:
        log.error("Simulated boot failure: exiting with status %d", faults.boot_exit_code)
        return faults.boot_exit_code
    try:
        server = build_server(options)
    except BootError as exc:
        log.error("%s", exc)
        return 1
    listener = await start(server, options)
    start_collecting()
    log.info("Application startup complete.")
    stats = asyncio.create_task(log_stats(server.engine, options.stats_interval_s))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("Shutting down the API server.")
    stats.cancel()
    await listener.close()
    await server.engine.close()
    return 0


if __name__ == "__main__":
    main()
