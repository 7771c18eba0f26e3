"""The simulator's process ends with vLLM's status and log lines, without the interpreter's
teardown (llmd/engine/sim/__main__.py `exit_now`)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

# Runs the entry point with an atexit function that says whether the teardown ran.
SCRIPT = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('TEARDOWN', flush=True))\n"
    "sys.argv = ['llmd.engine.sim', *sys.argv[1:]]\n"
    "from llmd.engine.sim.__main__ import main\n"
    "main()\n"
)


def test_a_boot_failure_exits_with_its_status_and_its_line_without_teardown(
    tiny_model: Path, tmp_path: Path
) -> None:
    """`--fault-boot-exit 3`: status 3, the error line written, no atexit function run."""
    argv = [sys.executable, "-c", SCRIPT, "--model", str(tiny_model)]
    argv += ["--uds", str(tmp_path / "e.sock"), "--fault-boot-exit", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "Simulated boot failure: exiting with status 3" in done.stdout
    assert "TEARDOWN" not in done.stdout


def test_sigterm_stops_it_with_status_zero_and_its_last_line_without_teardown(
    tiny_model: Path, tmp_path: Path
) -> None:
    """SIGTERM after start-up: status 0, "Shutting down the API server." written, no atexit
    function run."""
    sock = tmp_path / "e.sock"
    argv = [sys.executable, "-c", SCRIPT, "--model", str(tiny_model), "--uds", str(sock)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        seen = []
        for line in child.stdout:
            seen.append(line)
            if "Application startup complete." in line:
                break
        # Its signal handlers are in place once it answers (the line comes just before).
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://sim") as client:
            assert client.get("/health").status_code == 200
        child.send_signal(signal.SIGTERM)
        rest = child.stdout.read()
        assert child.wait(timeout=60) == 0
    assert "Shutting down the API server." in rest
    assert "TEARDOWN" not in "".join(seen) + rest


# Runs the simulator as `python -m llmd.engine.sim` does (as `__main__`), with a line on stdout
# at each pass of the cyclic collector and when the collector is turned off and on. A pass may
# come before the simulator's first line turns it off (the interpreter's and runpy's own
# start, more of them without a bytecode cache): only the passes after it count.
AS_MAIN = (
    "import gc, runpy, sys\n"
    "def seen(phase, info):\n"
    "    if phase == 'start':\n"
    "        print('COLLECTION', info['generation'], flush=True)\n"
    "gc.callbacks.append(seen)\n"
    "turn_off = gc.disable\n"
    "def disable():\n"
    "    print('COLLECTOR OFF', flush=True)\n"
    "    turn_off()\n"
    "gc.disable = disable\n"
    "turn_on = gc.enable\n"
    "def enable():\n"
    "    print('COLLECTOR ON, objects frozen:', gc.get_freeze_count() > 0, flush=True)\n"
    "    turn_on()\n"
    "gc.enable = enable\n"
    "sys.argv = ['llmd.engine.sim', *sys.argv[1:]]\n"
    "runpy.run_module('llmd.engine.sim', run_name='__main__', alter_sys=True)\n"
)


def test_start_up_runs_no_collection_and_turns_the_collector_on_to_serve(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Run as a program, the simulator imports and builds itself with the cyclic collector off
    (no pass before "Application startup complete."), then turns it on with start-up's objects
    frozen out of its passes, before it says it serves."""
    sock = tmp_path / "e.sock"
    argv = [sys.executable, "-c", AS_MAIN, "--model", str(tiny_model), "--uds", str(sock)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        start_up = []
        for line in child.stdout:
            start_up.append(line.strip())
            if "Application startup complete." in line:
                break
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://sim") as client:
            assert client.get("/health").status_code == 200
        child.send_signal(signal.SIGTERM)
        child.stdout.read()
        assert child.wait(timeout=60) == 0
    after_off = start_up[start_up.index("COLLECTOR OFF") :]
    assert not [line for line in after_off if line.startswith("COLLECTION")]
    assert "COLLECTOR ON, objects frozen: True" in start_up
