"""Boot either engine the contract suite and the calibration scripts compare, on a fresh Unix
socket: a real vLLM (CPU build, etc/demo.toml's flags) or the simulator (its defaults,
mimicking the vLLM version the tests' vLLM Python has)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.sim_process import SimProcess
from tests.support.vllm_engine import MAX_MODEL_LEN, Engine, vllm_engine
from tests.support.vllm_python import vllm_version


@contextlib.contextmanager
def booted_engine(kind: str, model: Path, sim_args: Sequence[str] = ()) -> Iterator[Engine]:
    """`kind` 'vllm' or 'sim' (with `sim_args` added to its flags) serving `model` as `tiny`
    with max_model_len 1024; stopped on exit. Raises RuntimeError (with the engine's log) when
    it does not come up."""
    if kind == "vllm":
        with vllm_engine(model) as engine:
            yield engine
        return
    sim = SimProcess.start(
        model, "--max-model-len", str(MAX_MODEL_LEN), "--vllm-version", vllm_version(), *sim_args
    )
    try:
        sim.wait_ready()
        yield Engine("sim", sim.socket, sim.log_path)
    finally:
        sim.stop()
